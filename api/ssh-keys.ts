import { createHash } from 'node:crypto';

/** One line `type base64 [comment]`, the form of ~/.ssh/id_*.pub and authorized_keys. */
export const PUBLIC_KEY_LINE = /^(\S+) ([A-Za-z0-9+/]+={0,2})(?: +([^\r\n]*))?$/;

/** A public key's fingerprint as `ssh-keygen -l` prints it (`SHA256:` and unpadded base64), from its line; null for another text. */
export function sshFingerprint(publicKeyLine: string): string | null {
  const match = PUBLIC_KEY_LINE.exec(publicKeyLine.trim());
  if (!match) return null;
  return `SHA256:${createHash('sha256').update(Buffer.from(match[2]!, 'base64')).digest('base64').replace(/=+$/, '')}`;
}
