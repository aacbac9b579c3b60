import type { ConsoleSession } from '../../../api/objects.js';
import { useState } from 'preact/hooks';
import { signIn } from '../api.js';

/** The token is sent once, exchanged for the session cookie, and then forgotten: never in the URL or storage. */
export function SignInPage({ notice, onSignedIn }: { notice: string | null; onSignedIn: (session: ConsoleSession) => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const session = await signIn(token);
      setToken('');
      onSignedIn(session);
    } catch (failure) {
      setError((failure as Error).message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="sign-in">
      <form onSubmit={(event) => void submit(event)} method="post" action="/api/session">
        <h1>orchestrator</h1>
        {notice && <p class="notice">{notice}</p>}
        <label for="token">User token</label>
        <input id="token" name="token" type="password" autocomplete="current-password" required autofocus
          value={token} onInput={(event) => setToken((event.target as HTMLInputElement).value)} />
        <p class="hint">The token <code>orchestrator server</code> printed for the admin, or the one an admin made for you with <code>orchestrator user create</code>.</p>
        {error && <p class="error" role="alert">{error}</p>}
        <button type="submit" class="primary" disabled={busy || token === ''}>Sign in</button>
      </form>
    </main>
  );
}
