import { useState } from 'preact/hooks';
import type { ConsoleSession, Member, ProjectBackend, Role } from '../../../api/objects.js';
import type { SecretInfo, SecretRequest } from '../../../api/secrets.js';
import { call, projectPath } from '../api.js';
import { ConfirmButton } from '../confirm-button.js';
import { Age, useNow } from '../format.js';
import { useApi, type ApiRead } from '../use-api.js';
import { useSubmit } from '../use-submit.js';

const ROLES: Role[] = ['user', 'admin'];

/**
 * A project's members and roles, its secrets (names only) and its backends (credentials never shown). Admins of the
 * project, and global admins, get the controls that change them; the server refuses anyone else anyway.
 */
export function SettingsPage({ project, session }: { project: string; session: ConsoleSession }) {
  const members = useApi<Member[]>(`${projectPath(project)}/members`);
  const me = members.data?.find((member) => member.user === session.user.name);
  const admin = session.user.admin || me?.role === 'admin';
  return (
    <section class="settings">
      <div class="toolbar"><h2>Settings of {project}</h2>
        <span class="muted">{admin ? 'You can change these settings.' : `You are a ${me?.role ?? 'member'} here: only the project's admins change these settings.`}</span>
      </div>
      <Members project={project} members={members} admin={admin} self={session.user.name} />
      <Secrets project={project} admin={admin} />
      <Backends project={project} />
    </section>
  );
}

function Members({ project, members, admin, self }: { project: string; members: ApiRead<Member[]>; admin: boolean; self: string }) {
  const [user, setUser] = useState('');
  const [role, setRole] = useState<Role>('user');
  const form = useSubmit();
  const path = `${projectPath(project)}/members`;
  const change = async (member: string, newRole: Role) => {
    await call('POST', path, { user: member, role: newRole });
    members.reload();
  };
  return (
    <div class="panel" id="members">
      <h3>Members</h3>
      {members.error && <p class="error" role="alert">{members.error}</p>}
      {members.data && (
        <table class="members">
          <thead><tr><th>User</th><th>Role</th>{admin && <th></th>}</tr></thead>
          <tbody>{members.data.map((member) => (
            <tr key={member.user} data-member={member.user}>
              <td>{member.user}{member.user === self && <span class="muted"> (you)</span>}</td>
              <td>{admin ? (
                <select aria-label={`role of ${member.user}`} value={member.role} onChange={(event) => void form.submit(() => change(member.user, (event.target as HTMLSelectElement).value as Role))}>
                  {ROLES.map((value) => <option value={value}>{value}</option>)}
                </select>
              ) : member.role}</td>
              {admin && <td class="actions-cell"><ConfirmButton label="Remove" question={`Remove ${member.user} from ${project}?`} yes="Yes, remove"
                act={async () => { await call('DELETE', `${path}/${encodeURIComponent(member.user)}`); members.reload(); }} /></td>}
            </tr>
          ))}</tbody>
        </table>
      )}
      {admin && (
        <form class="inline-form" onSubmit={(event) => {
          event.preventDefault();
          void form.submit(() => call('POST', path, { user: user.trim(), role })).then((done) => { if (done) { setUser(''); members.reload(); } });
        }}>
          <label>User <input value={user} required placeholder="user name" onInput={(event) => setUser((event.target as HTMLInputElement).value)} /></label>
          <label>Role <select value={role} onChange={(event) => setRole((event.target as HTMLSelectElement).value as Role)}>
            {ROLES.map((value) => <option value={value}>{value}</option>)}
          </select></label>
          <button class="primary" disabled={form.busy}>Add member</button>
          {form.error && <span class="error" role="alert">{form.error}</span>}
        </form>
      )}
    </div>
  );
}

function Secrets({ project, admin }: { project: string; admin: boolean }) {
  const now = useNow(10_000);
  const path = `${projectPath(project)}/secrets`;
  const secrets = useApi<SecretInfo[]>(path);
  const [name, setName] = useState('');
  const [value, setValue] = useState('');
  const form = useSubmit();
  return (
    <div class="panel" id="secrets">
      <h3>Secrets</h3>
      <p class="muted">Runs use a secret as <code>{'${{ secrets.NAME }}'}</code>. Values are never shown here.</p>
      {secrets.error && <p class="error" role="alert">{secrets.error}</p>}
      {secrets.data && (secrets.data.length === 0 ? <p class="empty">No secrets yet.{admin ? ' Set one below.' : ' An admin of the project can set them.'}</p> : (
        <table class="secrets">
          <thead><tr><th>Name</th><th>Created</th><th>Value set</th>{admin && <th></th>}</tr></thead>
          <tbody>{secrets.data.map((secret) => (
            <tr key={secret.name} data-secret={secret.name}>
              <td><code>{secret.name}</code></td>
              <td><Age at={secret.createdAt} now={now} /></td>
              <td><Age at={secret.updatedAt} now={now} /></td>
              {admin && <td class="actions-cell">
                <button onClick={() => { setName(secret.name); setValue(''); document.getElementById('secret-value')?.focus(); }}>Set value</button>{' '}
                <ConfirmButton label="Delete" question={`Delete secret ${secret.name}?`} yes="Yes, delete"
                  act={async () => { await call('DELETE', `${path}/${encodeURIComponent(secret.name)}`); secrets.reload(); }} />
              </td>}
            </tr>
          ))}</tbody>
        </table>
      ))}
      {admin && (
        <form class="inline-form" onSubmit={(event) => {
          event.preventDefault();
          const request: SecretRequest = { value };
          void form.submit(() => call('PUT', `${path}/${encodeURIComponent(name.trim())}`, request)).then((done) => {
            if (done) { setName(''); setValue(''); secrets.reload(); }
          });
        }}>
          <label>Name <input value={name} required placeholder="HF_TOKEN" onInput={(event) => setName((event.target as HTMLInputElement).value)} /></label>
          <label>Value <input id="secret-value" type="password" autocomplete="off" value={value} required onInput={(event) => setValue((event.target as HTMLInputElement).value)} /></label>
          <button class="primary" disabled={form.busy}>Set secret</button>
          {form.error && <span class="error" role="alert">{form.error}</span>}
        </form>
      )}
    </div>
  );
}

function Backends({ project }: { project: string }) {
  const backends = useApi<ProjectBackend[]>(`${projectPath(project)}/backends`);
  return (
    <div class="panel" id="backends">
      <h3>Backends</h3>
      <p class="muted">As the server's <code>config.yml</code> sets them up (change them there, then restart the server). Credentials are never shown.</p>
      {backends.error && <p class="error" role="alert">{backends.error}</p>}
      {backends.data && (
        <table class="backends">
          <thead><tr><th>Type</th><th>Settings</th><th>Credentials</th></tr></thead>
          <tbody>{backends.data.map((backend, index) => (
            <tr key={index} data-backend={backend.type}>
              <td>{backend.type}</td>
              <td>{Object.keys(backend.settings).length === 0 ? <span class="muted">defaults</span>
                : Object.entries(backend.settings).map(([field, setting]) => <div key={field}><span class="muted">{field}:</span> <code>{String(setting)}</code></div>)}</td>
              <td>{backend.credentials ? `${backend.credentials} (set, hidden)` : <span class="muted">none needed</span>}</td>
            </tr>
          ))}</tbody>
        </table>
      )}
    </div>
  );
}
