import { timingSafeEqual } from 'node:crypto';
import ssh2, { type ParsedKey, type PublicKeyAuthContext } from 'ssh2';

/**
 * The public keys of an OpenSSH authorized_keys text (one per line, optionally after options; blank
 * lines and comments skipped). A line that is not a key is left out: it can only fail to match.
 */
export function parseAuthorizedKeys(text: string): ParsedKey[] {
  const keys: ParsedKey[] = [];
  for (const line of text.split('\n')) {
    const fields = line.trim().split(/\s+/);
    const start = fields.findIndex((field) => /^(ssh-|ecdsa-|sk-)/.test(field));
    if (line.trim().startsWith('#') || start < 0 || fields[start + 1] === undefined) continue;
    const parsed = ssh2.utils.parseKey(`${fields[start]} ${fields[start + 1]}`);
    if (!(parsed instanceof Error)) keys.push(parsed);
  }
  return keys;
}

/** Whether a publickey attempt offers one of `keys` and, once it signs, proves to hold its private half. */
export function publicKeyAccepted(keys: readonly ParsedKey[], context: PublicKeyAuthContext): boolean {
  const offered = context.key;
  const key = keys.find((candidate) => {
    const blob = candidate.getPublicSSH();
    return blob.length === offered.data.length && timingSafeEqual(blob, offered.data);
  });
  if (!key) return false;
  if (!context.signature || !context.blob) return true;
  return key.verify(context.blob, context.signature, context.hashAlgo) === true;
}
