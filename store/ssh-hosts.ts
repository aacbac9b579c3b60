import type { Instance } from '../api/objects.js';
import type { Queryable } from './db.js';
import { BLOCKS_BUSY, blocksView, instanceView, toInstance, type InstanceRecord } from './instances.js';

/** The newest instance of each host an SSH fleet has had, ended or not: a host's failure shows until it is tried again. */
export async function latestHostInstances(db: Queryable, fleetId: string): Promise<InstanceRecord[]> {
  const rows = await db.query(
    `SELECT DISTINCT ON (ssh_host->>'name') * FROM instances WHERE fleet_id = $1 AND ssh_host IS NOT NULL
     ORDER BY ssh_host->>'name', created_at DESC`, [fleetId]);
  return rows.map(toInstance);
}

/**
 * What `orchestrator fleet` shows of an SSH fleet: the newest instance of each of its `hosts`, and of each host
 * removed from it that has not stopped yet, in the order they were made.
 */
export async function listHostInstanceViews(db: Queryable, fleetId: string, hosts: readonly string[]): Promise<Instance[]> {
  const rows = await db.query(
    `SELECT i.*, f.name AS fleet_name, f.spec AS fleet_spec, r.name AS run_name, coalesce(a.dollars, 0)::float8 AS cost, ${BLOCKS_BUSY} FROM (
       SELECT DISTINCT ON (ssh_host->>'name') * FROM instances WHERE fleet_id = $1 AND ssh_host IS NOT NULL
       ORDER BY ssh_host->>'name', created_at DESC) i
     JOIN fleets f ON f.id = i.fleet_id LEFT JOIN runs r ON r.id = i.run_id LEFT JOIN instance_accruals a ON a.instance_id = i.id
     WHERE i.status <> 'terminated' OR i.ssh_host->>'name' = ANY($2::text[])
     ORDER BY i.created_at`, [fleetId, hosts]);
  return rows.map((r) => {
    const instance = toInstance(r);
    return instanceView(instance, r.fleet_name, r.run_name, r.cost, blocksView(r.fleet_spec, instance, r.blocks_busy));
  });
}

/**
 * A host removed from its fleet stops once no run holds it: an idle (or still starting) instance is stopped now,
 * a busy one is left to finish its run, and is stopped by a later pass.
 */
export async function stopRemovedHost(db: Queryable, instanceId: string, message: string): Promise<boolean> {
  const rows = await db.query(
    `UPDATE instances SET status = 'terminating', termination_reason = 'removed_from_fleet', status_message = $2,
       updated_at = now(), next_reconcile_at = now()
     WHERE id = $1 AND run_id IS NULL AND status IN ('pending', 'provisioning', 'idle') RETURNING id`, [instanceId, message]);
  return rows.length > 0;
}
