import { useLayoutEffect, useRef, useState } from 'preact/hooks';

/**
 * A button that asks first, in place: `question`, then `yes` or Cancel (or Escape). `act` runs on yes; what it throws is shown
 * beside the button, so a refusal from the server is read where it happened.
 */
export function ConfirmButton({ label, question, yes, act, danger = true }: {
  label: string; question: string; yes: string; act: () => Promise<unknown>; danger?: boolean;
}) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const yesButton = useRef<HTMLButtonElement>(null);
  const askButton = useRef<HTMLButtonElement>(null);
  const asked = useRef(false);
  // The keyboard lands on the answer, as it would in a dialog, and back on the button once answered. A layout effect moves it
  // before the next frame, so a key pressed at once (Escape) already reaches the question.
  useLayoutEffect(() => {
    if (asking) yesButton.current?.focus();
    else if (asked.current) askButton.current?.focus();
    asked.current = asking;
  }, [asking]);
  const confirm = async () => {
    setBusy(true);
    setError(null);
    try {
      await act();
      setAsking(false);
    } catch (failure) {
      setError((failure as Error).message);
    } finally {
      setBusy(false);
    }
  };
  if (asking) {
    return (
      <span class="confirm" role="group" aria-label={question} onKeyDown={(event) => { if (event.key === 'Escape') { setAsking(false); setError(null); } }}>
        <span>{question}</span>
        <button class={danger ? 'danger' : 'primary'} disabled={busy} onClick={() => void confirm()} ref={yesButton}>{yes}</button>
        <button onClick={() => { setAsking(false); setError(null); }}>Cancel</button>
        {error && <span class="error" role="alert">{error}</span>}
      </span>
    );
  }
  return <button ref={askButton} onClick={() => setAsking(true)}>{label}</button>;
}
