import type { CAC } from 'cac';
import type { ServerInfo, User, UserWithToken } from '../../api/objects.js';
import { optionText } from '../args.js';
import { ApiClient } from '../client.js';
import { configPath, loadConfig, saveConfig, selectProject, type ProjectSettings } from '../config.js';
import { action, CliError } from '../errors.js';
import { formatTime, printJson } from '../format.js';
import { confirm, ensureCanConfirm } from '../prompt.js';
import { renderTable } from '../table.js';

interface UserFlags {
  admin?: boolean;
  json?: boolean;
  yes?: boolean;
}

const ACTIONS = ['create', 'list', 'delete', 'rotate-token'];

export function registerUser(cli: CAC): void {
  cli.command('user [action] [name]', 'Manage the server\'s users (admins): create, list, delete, rotate-token (anyone: their own)')
    .option('--admin', 'create: a global admin, who may do everything on every project')
    .option('--json', 'print JSON')
    .option('-y, --yes', 'delete: do not ask for confirmation')
    .option('--project <name>', 'Project whose server to use (default: the default project)')
    .example('orchestrator user create alice')
    .example('orchestrator user rotate-token alice')
    .action(action(async (verb: string | undefined, name: string | undefined, flags: UserFlags) => {
      const settings = selectProject(loadConfig(), optionText(['project']));
      const client = new ApiClient(settings);
      switch (verb ?? 'list') {
        case 'list': return listUsers(client, flags);
        case 'create': return createUser(client, userName(verb!, name), flags);
        case 'delete': return deleteUser(client, userName(verb!, name), flags);
        case 'rotate-token': return rotateToken(client, settings, userName(verb!, name), flags);
        default: throw new CliError(`unknown user action "${verb}"; use one of ${ACTIONS.join(', ')}`);
      }
    }));
}

function userName(verb: string, name: string | undefined): string {
  if (name === undefined) throw new CliError(`give the user: orchestrator user ${verb} NAME`);
  return String(name);
}

const userPath = (name: string) => `/api/users/${encodeURIComponent(name)}`;

async function listUsers(client: ApiClient, flags: UserFlags): Promise<void> {
  const users = await client.get<User[]>('/api/users');
  if (flags.json === true) {
    printJson(users);
    return;
  }
  process.stdout.write(renderTable(['user', 'admin', 'created'], users.map((u) => [u.name, u.admin ? 'yes' : '', formatTime(u.createdAt)])));
}

async function createUser(client: ApiClient, name: string, flags: UserFlags): Promise<void> {
  const created = await client.post<UserWithToken>('/api/users', { name, admin: flags.admin === true });
  if (flags.json === true) {
    printJson(created);
    return;
  }
  process.stdout.write(`user ${created.name} created${created.admin ? ' (admin)' : ''}\n`);
  printToken(client, created);
  if (!created.admin) process.stdout.write(`it may use project ${client.project} once a member: orchestrator member add ${created.name}\n`);
}

async function deleteUser(client: ApiClient, name: string, flags: UserFlags): Promise<void> {
  const yes = flags.yes === true;
  ensureCanConfirm(yes, 'delete the user');
  if (!(await confirm(`Delete user ${name}? Its token stops working at once.`, yes))) {
    process.stderr.write(`user ${name} kept\n`);
    return;
  }
  await client.delete(userPath(name));
  process.stdout.write(`user ${name} deleted; its token no longer works and it is no longer a member of any project\n`);
}

async function rotateToken(client: ApiClient, settings: ProjectSettings, name: string, flags: UserFlags): Promise<void> {
  const { user: caller } = await client.get<ServerInfo>('/api/server/info');
  const rotated = await client.post<UserWithToken>(`${userPath(name)}/rotate-token`);
  if (caller === rotated.name) {
    const updated = useNewToken(settings, rotated.token);
    process.stderr.write(`${configPath()} now uses the new token for ${updated.join(', ')}\n`);
  }
  if (flags.json === true) {
    printJson(rotated);
    return;
  }
  process.stdout.write(`user ${rotated.name} has a new token; the old one no longer works\n`);
  printToken(client, rotated);
}

/** The token appears here and nowhere else: the server keeps only its hash. */
function printToken(client: ApiClient, user: UserWithToken): void {
  process.stdout.write([
    `its token is shown only this once; ${user.name} connects with:`,
    `  orchestrator project add --name ${client.project} --url ${client.url} --token ${user.token}`,
    '',
  ].join('\n'));
}

/** The caller's own token was replaced: every project of this client that used it on that server gets the new one. */
function useNewToken(old: ProjectSettings, token: string): string[] {
  const config = loadConfig();
  const stale = config.projects.filter((p) => p.url === old.url && p.token === old.token);
  saveConfig({ projects: config.projects.map((p) => (stale.includes(p) ? { ...p, token } : p)) });
  return stale.map((p) => p.name);
}
