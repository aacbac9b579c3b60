import { useState } from 'preact/hooks';
import type { User, UserWithToken } from '../../../api/objects.js';
import { call } from '../api.js';
import { ConfirmButton } from '../confirm-button.js';
import { Age, useNow } from '../format.js';
import { useApi } from '../use-api.js';

/**
 * The server's users, for global admins only (the server refuses anyone else, and the console shows no link): create
 * one, rotate a token, delete one. A new token is shown once, here, and never again; the server keeps only its hash.
 */
export function UsersPage({ self }: { self: string }) {
  const now = useNow(10_000);
  const users = useApi<User[]>('/api/users');
  const [issued, setIssued] = useState<UserWithToken | null>(null);
  const [name, setName] = useState('');
  const [admin, setAdmin] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const create = async (event: Event) => {
    event.preventDefault();
    setError(null);
    try {
      setIssued(await call<UserWithToken>('POST', '/api/users', { name: name.trim(), admin }));
      setName('');
      setAdmin(false);
      users.reload();
    } catch (failure) {
      setError((failure as Error).message);
    }
  };
  return (
    <section>
      <div class="toolbar"><h2>Users</h2></div>
      {users.error && <p class="error" role="alert">{users.error}</p>}
      {issued && (
        <div class="notice token" role="status">
          <p>The token of <strong>{issued.name}</strong>, shown only now: copy it and hand it to them; it signs in here and in the CLI.</p>
          <pre data-token>{issued.token}</pre>
          <button onClick={() => setIssued(null)}>Done, hide it</button>
        </div>
      )}
      {users.data && (
        <table class="users">
          <thead><tr><th>Name</th><th>Role</th><th>Created</th><th></th></tr></thead>
          <tbody>{users.data.map((user) => (
            <tr key={user.name} data-user={user.name}>
              <td>{user.name}{user.name === self && <span class="muted"> (you)</span>}</td>
              <td>{user.admin ? 'admin' : 'user'}</td>
              <td><Age at={user.createdAt} now={now} /></td>
              <td class="actions-cell">
                <ConfirmButton label="Rotate token" question={`Replace ${user.name}'s token? The old one stops working at once.`} yes="Yes, rotate" danger={false}
                  act={async () => setIssued(await call<UserWithToken>('POST', `/api/users/${encodeURIComponent(user.name)}/rotate-token`))} />{' '}
                {user.name !== self && <ConfirmButton label="Delete" question={`Delete user ${user.name}?`} yes="Yes, delete"
                  act={async () => { await call('DELETE', `/api/users/${encodeURIComponent(user.name)}`); users.reload(); }} />}
              </td>
            </tr>
          ))}</tbody>
        </table>
      )}
      <form class="inline-form" onSubmit={(event) => void create(event)}>
        <label>New user <input value={name} required placeholder="name" onInput={(event) => setName((event.target as HTMLInputElement).value)} /></label>
        <label><input type="checkbox" checked={admin} onChange={(event) => setAdmin((event.target as HTMLInputElement).checked)} /> global admin</label>
        <button class="primary">Create user</button>
        {error && <span class="error" role="alert">{error}</span>}
      </form>
      <p class="muted">A new user sees nothing until they are a member of a project: add them from the project's Settings.</p>
    </section>
  );
}
