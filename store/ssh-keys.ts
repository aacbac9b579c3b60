import type { SshKey } from '../api/objects.js';
import type { Queryable, Row } from './db.js';

/** How many public keys one user may register: all of them travel to the agent in one header at each connection. */
export const MAX_SSH_KEYS_PER_USER = 16;

const toSshKey = (r: Row): SshKey => ({ fingerprint: r.fingerprint, publicKey: r.public_key, createdAt: r.created_at.toISOString() });

/** Registers the key; the same key again (by fingerprint) is no change. `created` says whether it is new. */
export async function addSshKey(db: Queryable, userId: string, publicKey: string, fingerprint: string): Promise<{ key: SshKey; created: boolean }> {
  const inserted = await db.query(
    `INSERT INTO ssh_keys (user_id, public_key, fingerprint) VALUES ($1, $2, $3)
     ON CONFLICT (user_id, fingerprint) DO NOTHING RETURNING *`, [userId, publicKey, fingerprint]);
  if (inserted[0]) return { key: toSshKey(inserted[0]), created: true };
  const existing = await db.query('SELECT * FROM ssh_keys WHERE user_id = $1 AND fingerprint = $2', [userId, fingerprint]);
  return { key: toSshKey(existing[0]), created: false };
}

export async function listSshKeys(db: Queryable, userId: string): Promise<SshKey[]> {
  return (await db.query('SELECT * FROM ssh_keys WHERE user_id = $1 ORDER BY created_at, fingerprint', [userId])).map(toSshKey);
}

/** Whether the user had the key with this fingerprint to delete. */
export async function deleteSshKey(db: Queryable, userId: string, fingerprint: string): Promise<boolean> {
  return (await db.query('DELETE FROM ssh_keys WHERE user_id = $1 AND fingerprint = $2 RETURNING fingerprint', [userId, fingerprint])).length > 0;
}

/** The user's keys as the text of an OpenSSH authorized_keys file: what the agent lets in. */
export async function authorizedKeysOf(db: Queryable, userId: string): Promise<string> {
  return (await listSshKeys(db, userId)).map((k) => `${k.publicKey}\n`).join('');
}
