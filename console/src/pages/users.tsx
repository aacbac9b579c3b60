import type { User } from '../../../api/objects.js';
import { useEffect, useState } from 'preact/hooks';
import { call } from '../api.js';
import { Age, useNow } from '../format.js';

/** The server's users, for global admins only (the server refuses anyone else, and the console shows no link). */
export function UsersPage() {
  const now = useNow(10_000);
  const [users, setUsers] = useState<User[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    call<User[]>('GET', '/api/users').then(setUsers, (failure) => setError((failure as Error).message));
  }, []);
  return (
    <section>
      <div class="toolbar"><h2>Users</h2></div>
      {error && <p class="error" role="alert">{error}</p>}
      {users && (
        <table>
          <thead><tr><th>Name</th><th>Role</th><th>Created</th></tr></thead>
          <tbody>{users.map((user) => <tr key={user.name}><td>{user.name}</td><td>{user.admin ? 'admin' : 'user'}</td><td><Age at={user.createdAt} now={now} /></td></tr>)}</tbody>
        </table>
      )}
      <p class="muted">Add a user from a terminal: <code>orchestrator user create NAME</code>, then <code>orchestrator member add</code> to a project.</p>
    </section>
  );
}
