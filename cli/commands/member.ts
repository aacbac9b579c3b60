import type { CAC } from 'cac';
import type { Member } from '../../api/objects.js';
import type { ApiClient } from '../client.js';
import { connect } from '../connect.js';
import { action, CliError } from '../errors.js';
import { printJson } from '../format.js';
import { renderTable } from '../table.js';

interface MemberFlags {
  role?: string;
  json?: boolean;
}

const ACTIONS = ['add', 'remove', 'list'];

export function registerMember(cli: CAC): void {
  cli.command('member [action] [user]', 'Manage the members of a project (its admins and global admins): add, remove, list')
    .option('--role <role>', 'add: admin (may also manage the members) or user (may use the project); default user; given for a member, changes its role')
    .option('--json', 'list: print JSON')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator member add alice')
    .example('orchestrator member add bob --role admin --project research')
    .action(action(async (verb: string | undefined, user: string | undefined, flags: MemberFlags) => {
      const client = connect();
      switch (verb ?? 'list') {
        case 'list': return listMembers(client, flags);
        case 'add': return addMember(client, userName(verb!, user), flags);
        case 'remove': return removeMember(client, userName(verb!, user));
        default: throw new CliError(`unknown member action "${verb}"; use one of ${ACTIONS.join(', ')}`);
      }
    }));
}

function userName(verb: string, user: string | undefined): string {
  if (user === undefined) throw new CliError(`give the user: orchestrator member ${verb} USER`);
  return String(user);
}

async function listMembers(client: ApiClient, flags: MemberFlags): Promise<void> {
  const members = await client.get<Member[]>(client.projectPath('/members'));
  if (flags.json === true) {
    printJson(members);
    return;
  }
  if (members.length === 0) {
    process.stdout.write(`project ${client.project} has no members (global admins may use it all the same); add one with orchestrator member add USER\n`);
    return;
  }
  process.stdout.write(renderTable(['user', 'role'], members.map((m) => [m.user, m.role])));
}

async function addMember(client: ApiClient, user: string, flags: MemberFlags): Promise<void> {
  const role = flags.role === undefined ? undefined : String(flags.role);
  if (role !== undefined && role !== 'admin' && role !== 'user') throw new CliError(`unknown role "${role}"; use --role admin or --role user`);
  const member = await client.post<Member>(client.projectPath('/members'), { user, role });
  process.stdout.write(`${member.user} is a member of project ${client.project} as ${member.role}\n`);
}

async function removeMember(client: ApiClient, user: string): Promise<void> {
  await client.delete(client.projectPath(`/members/${encodeURIComponent(user)}`));
  process.stdout.write(`${user} is no longer a member of project ${client.project}\n`);
}
