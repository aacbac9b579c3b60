import type { Queryable } from './db.js';
import { toReplica, type ReplicaRecord } from './services.js';

/**
 * The running replica of a service that `ssh` reaches: replica `n`, or without `n` the lowest-numbered ready one,
 * else the lowest-numbered running one (so that a replica failing its probes can still be looked into). Null when none runs.
 */
export async function sshReplica(db: Queryable, serviceId: string, n: number | null): Promise<ReplicaRecord | null> {
  const rows = await db.query(
    `SELECT * FROM runs WHERE service_id = $1 AND NOT deleted AND status = 'running' AND ($2::int IS NULL OR replica = $2)
     ORDER BY (ready_at IS NULL OR draining_since IS NOT NULL), replica LIMIT 1`, [serviceId, n]);
  return rows[0] ? toReplica(rows[0]) : null;
}
