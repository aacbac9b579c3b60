import { randomBytes, randomUUID } from 'node:crypto';
import { blockCount, isSplit } from '../api/blocks.js';
import type { Instance } from '../api/objects.js';
import type { Offer } from '../api/offer.js';
import type { SshHost } from '../api/ssh-fleet.js';
import type { ResourceRequirement } from '../api/resources.js';
import type { FleetSpec } from '../api/spec.js';
import type { InstanceStatus, InstanceTerminationReason } from '../api/status.js';
import { plannedOnce, type Db, type Queryable, type Row } from './db.js';
import { assignments, updateLeased } from './leases.js';

export interface InstanceRecord {
  id: string;
  projectId: string;
  fleetId: string;
  name: string;
  backend: string;
  requirement: ResourceRequirement;
  offer: Offer | null;
  backendInstanceId: string | null;
  agentUrl: string | null;
  agentToken: string;
  status: InstanceStatus;
  statusMessage: string;
  terminationReason: InstanceTerminationReason | null;
  runId: string | null;
  idleSince: Date | null;
  provisioningStartedAt: Date | null;
  unreachableSince: Date | null;
  /** The agent's SSH host key as it reports it, in OpenSSH's one-line form; null until it does. */
  sshHostKey: string | null;
  /** The host of an SSH fleet this instance is, as the fleet named it when the instance was made; null for other backends. */
  sshHost: SshHost | null;
  /** The address the fleet's other instances reach this one at, where it differs from the agent's: in its fleet's cluster network, or an SSH host's (reached through a tunnel). */
  internalIp: string | null;
  createdAt: Date;
  terminatedAt: Date | null;
}

export const toInstance = (r: Row): InstanceRecord => ({
  id: r.id, projectId: r.project_id, fleetId: r.fleet_id, name: r.name, backend: r.backend, requirement: r.requirement,
  offer: r.offer, backendInstanceId: r.backend_instance_id, agentUrl: r.agent_url, agentToken: r.agent_token,
  status: r.status, statusMessage: r.status_message, terminationReason: r.termination_reason, runId: r.run_id,
  idleSince: r.idle_since, provisioningStartedAt: r.provisioning_started_at, unreachableSince: r.unreachable_since,
  sshHostKey: r.ssh_host_key, sshHost: r.ssh_host ?? null, internalIp: r.internal_ip ?? null, createdAt: r.created_at, terminatedAt: r.terminated_at,
});

/** `blocks`: how many blocks runs hold and how many there are, for an instance of a fleet split into blocks. */
export function instanceView(i: InstanceRecord, fleetName: string, runName: string | null, cost: number, blocks: Instance['blocks'] = null): Instance {
  return {
    id: i.id, name: i.name, fleet: fleetName, backend: i.backend, status: i.status, statusMessage: i.statusMessage,
    terminationReason: i.terminationReason, gpu: i.offer?.gpu ?? null, region: i.offer?.region ?? null,
    pricePerHour: i.offer?.pricePerHour ?? null, cost, host: i.sshHost?.name ?? null, run: runName, idleSince: i.idleSince?.toISOString() ?? null,
    createdAt: i.createdAt.toISOString(), terminatedAt: i.terminatedAt?.toISOString() ?? null, blocks,
  };
}

/** The blocks runs hold of the instance `i`, as a column of a query that names it so. */
export const BLOCKS_BUSY = `(SELECT coalesce(sum(cardinality(held.blocks)), 0)::int FROM runs held
        WHERE held.instance_id = i.id AND held.blocks IS NOT NULL AND held.status NOT IN ('terminated', 'failed', 'done')) AS blocks_busy`;

export function blocksView(fleetSpec: Pick<FleetSpec, 'blocks' | 'ssh_config'>, instance: InstanceRecord, busy: number): Instance['blocks'] {
  if (!isSplit(fleetSpec) || instance.offer === null) return null;
  return { busy, total: blockCount(fleetSpec, instance.offer.gpu.count, instance.sshHost?.name ?? null) };
}

export interface NewInstance {
  projectId: string;
  fleetId: string;
  fleetName: string;
  backend: string;
  requirement: ResourceRequirement;
  runId: string | null;
  sshHost?: SshHost;
}

/** A pending instance: the instance controller provisions it. A run that reserves it owns it from the start. */
export async function insertInstance(db: Queryable, n: NewInstance): Promise<InstanceRecord> {
  const id = randomUUID();
  const [{ count }] = await db.query<{ count: number }>('SELECT count(*)::int AS count FROM instances WHERE fleet_id = $1', [n.fleetId]);
  const rows = await db.query(
    `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, agent_token, status, run_id, ssh_host)
     VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9::jsonb) RETURNING *`,
    [id, n.projectId, n.fleetId, `${n.fleetName}-${count}`, n.backend, n.requirement, randomBytes(24).toString('base64url'), n.runId, n.sshHost ?? null]);
  return toInstance(rows[0]);
}

export async function getInstance(db: Queryable, id: string): Promise<InstanceRecord | null> {
  const rows = await db.query('SELECT * FROM instances WHERE id = $1', [id]);
  return rows[0] ? toInstance(rows[0]) : null;
}

/** The instances with these ids, by id, in one query; an id with no instance is absent. */
export async function instancesByIds(db: Queryable, ids: readonly string[]): Promise<Map<string, InstanceRecord>> {
  const rows = await db.query('SELECT * FROM instances WHERE id = ANY($1::text[])', [ids]);
  return new Map(rows.map((row) => [row.id as string, toInstance(row)]));
}

export async function listFleetInstances(db: Queryable, fleetId: string): Promise<InstanceRecord[]> {
  return (await db.query(`SELECT * FROM instances WHERE fleet_id = $1 AND status <> 'terminated' ORDER BY created_at`, [fleetId])).map(toInstance);
}

/** The project's instances that are not gone, oldest first: the order the scheduler weighs them in. */
export async function listProjectInstances(db: Queryable, projectId: string): Promise<InstanceRecord[]> {
  return (await db.query(`SELECT * FROM instances WHERE project_id = $1 AND status <> 'terminated' ORDER BY created_at`, [projectId])).map(toInstance);
}

export async function listInstanceViews(db: Queryable, projectId: string, options: { fleetId?: string; includeTerminated: boolean }): Promise<Instance[]> {
  const rows = await db.query(
    `SELECT i.*, f.name AS fleet_name, f.spec AS fleet_spec, r.name AS run_name, coalesce(a.dollars, 0)::float8 AS cost,
       ${BLOCKS_BUSY}
     FROM instances i
     JOIN fleets f ON f.id = i.fleet_id LEFT JOIN runs r ON r.id = i.run_id LEFT JOIN instance_accruals a ON a.instance_id = i.id
     WHERE i.project_id = $1 AND ($2::text IS NULL OR i.fleet_id = $2) AND ($3 OR i.status <> 'terminated')
     ORDER BY i.created_at`,
    [projectId, options.fleetId ?? null, options.includeTerminated]);
  return rows.map((r) => {
    const instance = toInstance(r);
    return instanceView(instance, r.fleet_name, r.run_name, r.cost, blocksView(r.fleet_spec, instance, r.blocks_busy));
  });
}

type InstanceColumn = 'status' | 'status_message' | 'termination_reason' | 'offer' | 'backend_instance_id' | 'agent_url'
  | 'run_id' | 'idle_since' | 'provisioning_started_at' | 'unreachable_since' | 'terminated_at' | 'ssh_host_key' | 'internal_ip';

/** Writes the changes only while `owner` still holds the instance's lease; false when it lost it. */
export function updateInstance(db: Queryable, id: string, owner: string, patch: Partial<Record<InstanceColumn, unknown>>): Promise<boolean> {
  return updateLeased<InstanceColumn>(db, 'instances', id, owner, patch);
}

/**
 * A provisioned instance's agent answered: it is `busy` when a run holds it, else `idle`, as its row says when written.
 * The scheduler gives a provisioning instance its run without waiting for it, so the caller's copy may not know of that
 * run yet (written from it, the instance read idle and its run waited for it forever). Returns the status written; null
 * when `owner` lost the lease.
 */
export async function markInstanceReady(db: Queryable, id: string, owner: string, patch: Partial<Record<InstanceColumn, unknown>>): Promise<InstanceStatus | null> {
  const params: unknown[] = [id, owner];
  const sets = [...assignments(patch, params), `status = CASE WHEN run_id IS NULL THEN 'idle' ELSE 'busy' END`,
    'idle_since = CASE WHEN run_id IS NULL THEN now() END', 'updated_at = now()'];
  const [row] = await db.query<{ status: InstanceStatus }>(
    `UPDATE instances SET ${sets.join(', ')} WHERE id = $1 AND lease_owner = $2 RETURNING status`, params);
  return row?.status ?? null;
}

/**
 * A busy instance whose run ended goes idle, while `owner` holds its lease and it still belongs to that run (`runId`,
 * or none): a run placed on it meanwhile keeps it. False when nothing was written.
 */
export async function idleInstanceOfEndedRun(db: Queryable, id: string, owner: string, runId: string | null): Promise<boolean> {
  const rows = await db.query(
    `UPDATE instances SET status = 'idle', run_id = NULL, idle_since = now() WHERE id = $1 AND lease_owner = $2 AND run_id IS NOT DISTINCT FROM $3 RETURNING id`,
    [id, owner, runId]);
  return rows.length > 0;
}

/** An idle instance starts terminating, while `owner` holds its lease and no run has taken it; false when one has. */
export async function stopIdleInstance(db: Queryable, id: string, owner: string, reason: InstanceTerminationReason, message: string): Promise<boolean> {
  const rows = await db.query(
    `UPDATE instances SET status = 'terminating', termination_reason = $3, status_message = $4, updated_at = now()
     WHERE id = $1 AND lease_owner = $2 AND status = 'idle' AND run_id IS NULL RETURNING id`, [id, owner, reason, message]);
  return rows.length > 0;
}

/** How many of a fleet's instances are up or on their way (neither terminating nor terminated). */
export async function liveInstanceCount(db: Queryable, fleetId: string): Promise<number> {
  const [{ live }] = await db.query<{ live: number }>(
    `SELECT count(*)::int AS live FROM instances WHERE fleet_id = $1 AND status NOT IN ('terminated', 'terminating')`, [fleetId]);
  return live;
}

/** A busy instance goes back to idle once its run let go of it; only the run that holds it may free it. */
export async function releaseInstanceFromRun(db: Queryable, instanceId: string, runId: string): Promise<boolean> {
  const rows = await db.query(`${RELEASE_INSTANCE} WHERE id = $1 AND run_id = $2 RETURNING id`, [instanceId, runId]);
  return rows.length > 0;
}

/** Gives instances back from their run (idle again unless they are going away); the caller says which, in its WHERE. */
export const RELEASE_INSTANCE = `UPDATE instances SET run_id = NULL, status = CASE WHEN status = 'busy' THEN 'idle' ELSE status END,
       idle_since = now(), updated_at = now()`;

const BLOCK_HELD = `SELECT 1 FROM runs WHERE instance_id = $1 AND blocks IS NOT NULL AND status NOT IN ('terminated', 'failed', 'done') LIMIT 1`;

/**
 * An instance shared in blocks goes idle once no live run holds a block of it; false while one does. Its row is
 * locked first, so that a scheduler giving it a block at the same moment either waits for this or is seen by it.
 */
export async function idleSharedInstance(db: Db, id: string, owner: string): Promise<boolean> {
  // Most looks find a block still held, which takes no lock to see: the instance stays busy either way.
  if ((await db.query(BLOCK_HELD, [id])).length > 0) return false;
  return db.transaction(async (tx) => {
    const locked = await tx.query(`SELECT id FROM instances WHERE id = $1 AND lease_owner = $2 AND status = 'busy' AND run_id IS NULL FOR UPDATE`, [id, owner]);
    if (locked.length === 0) return false;
    if ((await tx.query(BLOCK_HELD, [id])).length > 0) return false;
    await tx.query(`UPDATE instances SET status = 'idle', idle_since = now(), updated_at = now() WHERE id = $1`, [id]);
    return true;
  });
}

/** Every live instance of a fleet falls due now (the fleet is going away: each is to look at its own end). */
export async function makeFleetInstancesDue(db: Queryable, fleetId: string): Promise<void> {
  await db.query(`UPDATE instances SET next_reconcile_at = now() WHERE fleet_id = $1 AND status <> 'terminated'`, [fleetId]);
}

/** A row's version: any write to the row changes it. */
export interface InstanceVersion {
  id: string;
  version: string;
}

/** A project's instances that are not terminated, oldest first, each with its row's version (`xmin`). */
export async function liveProjectInstanceVersions(db: Queryable, projectId: string): Promise<InstanceVersion[]> {
  return db.query<InstanceVersion & Row>(
    `SELECT id, xmin::text AS version FROM instances WHERE project_id = $1 AND status <> 'terminated' ORDER BY created_at`, [projectId]);
}

/** An instance with its row's version as read with it. */
export interface VersionedInstance {
  version: string;
  instance: InstanceRecord;
}

/** The instances with these ids, each with its row's version. */
export async function versionedInstances(db: Queryable, ids: readonly string[]): Promise<VersionedInstance[]> {
  const rows = await db.query('SELECT *, xmin::text AS version FROM instances WHERE id = ANY($1::text[])', [ids]);
  return rows.map((row) => ({ version: row.version as string, instance: toInstance(row) }));
}

/**
 * Gives an instance to a job (a run, or a node of one) while no other holds it: one that is up (`ready`) turns busy, one
 * still coming up keeps its status and the job waits for it. False when another took it first.
 */
export async function giveInstanceTo(db: Queryable, id: string, jobId: string, ready: boolean): Promise<boolean> {
  const rows = ready
    ? await db.query(plannedOnce(`UPDATE instances SET status = 'busy', run_id = $2, idle_since = NULL, updated_at = now()
                      WHERE id = $1 AND status = 'idle' AND run_id IS NULL RETURNING id`), [id, jobId])
    : await db.query(plannedOnce(`UPDATE instances SET run_id = $2, updated_at = now()
                      WHERE id = $1 AND status IN ('pending', 'provisioning') AND run_id IS NULL RETURNING id`), [id, jobId]);
  return rows.length > 0;
}

/** An instance shared in blocks turns busy as a run takes some; false when it is not up, or is a run's own. */
export async function takeBlocksOf(db: Queryable, id: string): Promise<boolean> {
  const rows = await db.query(
    `UPDATE instances SET status = 'busy', idle_since = NULL, updated_at = now() WHERE id = $1 AND status IN ('idle', 'busy') AND run_id IS NULL RETURNING id`, [id]);
  return rows.length > 0;
}

/** Locks, until the transaction ends, those of `ids` that no job holds and that are up or coming up; how many it locked. */
export async function lockFreeInstances(tx: Queryable, ids: readonly string[]): Promise<number> {
  const rows = await tx.query(
    `SELECT id FROM instances WHERE id = ANY($1::text[]) AND run_id IS NULL AND status IN ('idle', 'pending', 'provisioning') FOR UPDATE`, [ids]);
  return rows.length;
}
