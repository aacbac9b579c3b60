import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { homedir, hostname, userInfo } from 'node:os';
import { join } from 'node:path';
import type { SshKey } from '../api/objects.js';
import type { ApiClient } from './client.js';
import { CliError } from './errors.js';

/** `~/.orchestrator/ssh`, with HOME taken from the environment: the key pair, the ssh config and known_hosts of runs. */
export function sshDir(): string {
  return join(process.env.HOME || homedir(), '.orchestrator', 'ssh');
}

export function identityPath(): string {
  return join(sshDir(), 'id_ed25519');
}

/** The user's key pair for runs, made once (owner-only private key); returns the public key's line. */
export async function ensureKeyPair(): Promise<string> {
  const path = identityPath();
  const publicPath = `${path}.pub`;
  if (!existsSync(path)) {
    mkdirSync(sshDir(), { recursive: true, mode: 0o700 });
    rmSync(publicPath, { force: true });
    if (!sshKeygen(['-t', 'ed25519', '-N', '', '-q', '-C', keyComment(), '-f', path])) {
      const { generateEd25519KeyPair } = await import('../agent/ssh/key-pair.js');
      const pair = generateEd25519KeyPair(keyComment());
      writeFileSync(path, pair.private, { mode: 0o600 });
      writeFileSync(publicPath, `${pair.public}\n`, { mode: 0o644 });
    }
  }
  if (!existsSync(publicPath)) writeFileSync(publicPath, `${await publicKeyOf(path)}\n`, { mode: 0o644 });
  return readFileSync(publicPath, 'utf8').trim();
}

/** The key pair exists and its public key is registered with the server for the current user (idempotent). */
export async function ensureKeyRegistered(client: ApiClient): Promise<SshKey> {
  return client.request<SshKey>('PUT', '/api/users/me/ssh-keys', { publicKey: await ensureKeyPair() });
}

function keyComment(): string {
  return `orchestrator ${userInfo().username}@${hostname()}`;
}

/** Runs ssh-keygen; false when it is not installed. */
function sshKeygen(args: string[]): string | false {
  const result = spawnSync('ssh-keygen', args, { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
  if ((result.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') return false;
  if (result.status !== 0) throw new CliError(`ssh-keygen ${args.join(' ')} failed: ${result.stderr.trim() || `exit ${result.status}`}`);
  return result.stdout;
}

/** The public line of a private key whose .pub file went missing. */
async function publicKeyOf(path: string): Promise<string> {
  const derived = sshKeygen(['-y', '-f', path]);
  if (derived !== false) return derived.trim();
  const key = (await loadSsh2()).utils.parseKey(readFileSync(path));
  if (key instanceof Error) throw new CliError(`${path} is not a key ssh can read (${key.message}); remove it and a new one is made`);
  return `${key.type} ${key.getPublicSSH().toString('base64')} ${keyComment()}`;
}

/** Loaded only where ssh-keygen is missing: ssh2 is slow to load and most machines have ssh-keygen. */
async function loadSsh2(): Promise<typeof import('ssh2')> {
  return (await import('ssh2')).default;
}
