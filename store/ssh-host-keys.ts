import type { Queryable } from './db.js';

/** The public key an SSH fleet's host (or head node) showed at first contact, in OpenSSH's `type base64` form; null before it. */
export async function knownHostKey(db: Queryable, fleetId: string, address: string): Promise<string | null> {
  const rows = await db.query<{ public_key: string }>('SELECT public_key FROM ssh_host_keys WHERE fleet_id = $1 AND address = $2', [fleetId, address]);
  return rows[0]?.public_key ?? null;
}

/** Records the key of a first contact; a key recorded meanwhile by another server wins, and is returned. */
export async function recordHostKey(db: Queryable, fleetId: string, address: string, publicKey: string): Promise<string> {
  await db.query('INSERT INTO ssh_host_keys (fleet_id, address, public_key) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [fleetId, address, publicKey]);
  return (await knownHostKey(db, fleetId, address))!;
}

/** Forgets the keys of addresses the fleet no longer uses (all of them once it is gone), so that a host added again is a first contact. */
export async function forgetHostKeys(db: Queryable, fleetId: string, keep: readonly string[]): Promise<void> {
  await db.query('DELETE FROM ssh_host_keys WHERE fleet_id = $1 AND NOT (address = ANY($2::text[]))', [fleetId, keep]);
}
