import type { CAC } from 'cac';
import { existsSync, readFileSync } from 'node:fs';
import type { SshKey } from '../../api/objects.js';
import { sshFingerprint } from '../../api/ssh-keys.js';
import type { ApiClient } from '../client.js';
import { connect } from '../connect.js';
import { action, CliError } from '../errors.js';
import { formatAge, printJson } from '../format.js';
import { identityPath } from '../ssh-keys.js';
import { renderTable } from '../table.js';

interface SshKeyFlags {
  json?: boolean;
}

const ACTIONS = ['list', 'delete'];
const keysPath = '/api/users/me/ssh-keys';

export function registerSshKey(cli: CAC): void {
  cli.command('ssh-key [action] [fingerprint]', 'The SSH public keys that let you into your runs: list, delete (apply and ssh register this machine\'s)')
    .option('--json', 'list: print JSON')
    .example('orchestrator ssh-key list')
    .example('orchestrator ssh-key delete SHA256:3zQ0n8hQ7Yt6Jm1l5N8y0oW2c9qJv4R1tZ6uQ8xKpLs')
    .action(action(async (verb: string | undefined, fingerprint: string | undefined, flags: SshKeyFlags) => {
      const client = connect();
      switch (verb ?? 'list') {
        case 'list': return listKeys(client, flags);
        case 'delete': return deleteKey(client, fingerprint);
        default: throw new CliError(`unknown ssh-key action "${verb}"; use one of ${ACTIONS.join(', ')}`);
      }
    }));
}

/** The fingerprint of this machine's key pair for runs, when it has one. */
function localFingerprint(): string | null {
  const publicPath = `${identityPath()}.pub`;
  return existsSync(publicPath) ? sshFingerprint(readFileSync(publicPath, 'utf8')) : null;
}

async function listKeys(client: ApiClient, flags: SshKeyFlags): Promise<void> {
  const keys = await client.get<SshKey[]>(keysPath);
  if (flags.json === true) {
    printJson(keys);
    return;
  }
  if (keys.length === 0) {
    process.stdout.write('you have no SSH keys; apply, ssh or ssh-config registers this machine\'s\n');
    return;
  }
  const local = localFingerprint();
  const comment = (key: SshKey) => key.publicKey.split(' ').slice(2).join(' ');
  process.stdout.write(renderTable(['fingerprint', 'comment', 'added', ''], keys.map((key) => [
    key.fingerprint, comment(key), formatAge(key.createdAt), key.fingerprint === local ? 'this machine' : '',
  ])));
}

async function deleteKey(client: ApiClient, given: string | undefined): Promise<void> {
  if (given === undefined) throw new CliError('give the key\'s fingerprint: orchestrator ssh-key delete SHA256:... (ssh-key list shows them)');
  const text = String(given);
  const fingerprint = text.startsWith('SHA256:') ? text : `SHA256:${text}`;
  await client.delete(`${keysPath}/${encodeURIComponent(fingerprint)}`);
  const again = fingerprint === localFingerprint() ? '; this machine\'s key: the next apply, ssh or ssh-config from here registers it again' : '';
  process.stderr.write(`SSH key ${fingerprint} deleted: it opens no new session into your runs${again}\n`);
}
