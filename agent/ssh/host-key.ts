import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import ssh2 from 'ssh2';
import { generateEd25519KeyPair } from './key-pair.js';

export const HOST_KEY_FILE = 'ssh_host_ed25519_key';

export interface HostKey {
  /** OpenSSH private key text, as ssh2's server takes it. */
  privateKey: string;
  /** OpenSSH one-line form: "ssh-ed25519 AAAA...". */
  publicKey: string;
}

/** The agent's SSH host key: made once in `workDir` (mode 0600) and the same after a restart, so that clients can pin it. */
export function loadOrCreateHostKey(workDir: string): HostKey {
  const path = join(workDir, HOST_KEY_FILE);
  let privateKey: string;
  try {
    privateKey = readFileSync(path, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    privateKey = generateEd25519KeyPair().private;
    writeFileSync(path, privateKey, { mode: 0o600, flag: 'wx' });
  }
  const parsed = ssh2.utils.parseKey(privateKey);
  if (parsed instanceof Error) throw new Error(`the SSH host key in ${path} cannot be read: ${parsed.message}`);
  return { privateKey, publicKey: `${parsed.type} ${parsed.getPublicSSH().toString('base64')}` };
}
