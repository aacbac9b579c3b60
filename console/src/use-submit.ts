import { useState } from 'preact/hooks';

/** What one form sends, and the server's answer to it shown beside the form until the next try. */
export function useSubmit(): { error: string | null; busy: boolean; submit: (send: () => Promise<unknown>) => Promise<boolean> } {
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (send: () => Promise<unknown>) => {
    setBusy(true);
    setError(null);
    try {
      await send();
      return true;
    } catch (failure) {
      setError((failure as Error).message);
      return false;
    } finally {
      setBusy(false);
    }
  };
  return { error, busy, submit };
}
