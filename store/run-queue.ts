import type { ResourceRequirement } from '../api/resources.js';
import { plannedOnce, type Queryable, type Row } from './db.js';
import { eventParams, INSERT_EVENT, type EventInput } from './events.js';
import { toFleet, type FleetRecord } from './fleets.js';
import { NODE_JOB } from './nodes.js';
import type { RunDesire } from './runs.js';
import { SERVICE_PARENT } from './services.js';

/** Runs waiting for a place now: a service's own row and a multi-node task's nodes are placed through their parent. */
const DUE_IN_QUEUE = `status = 'submitted' AND NOT deleted AND next_reconcile_at <= now() AND NOT ${SERVICE_PARENT} AND NOT ${NODE_JOB}`;

/**
 * A queued run's place in the queue. `version` is the row's version (`xmin`): any write to the row changes it, so what
 * was read of an earlier version can be kept while it stays the same.
 */
export interface QueueEntry {
  id: string;
  project_id: string;
  version: string;
}

/** What placing a queued run reads of it besides its place, the same for as long as its version is. */
export interface QueuedRunRow {
  id: string;
  desired: RunDesire;
  status_message: string;
  name: string;
  kind: string;
  replica: number | null;
  requirement: ResourceRequirement;
  spec: Record<string, any>;
  first_submitted_at: Date;
}

/** The projects with runs waiting for a place, each with its active fleets (oldest first), in one statement. */
export async function projectsQueued(db: Queryable): Promise<Map<string, FleetRecord[]>> {
  const rows = await db.query(
    `SELECT q.project_id AS queued_project_id, f.* FROM (SELECT DISTINCT project_id FROM runs WHERE ${DUE_IN_QUEUE}) q
     LEFT JOIN fleets f ON f.project_id = q.project_id AND f.status = 'active' ORDER BY f.created_at`);
  const projects = new Map<string, FleetRecord[]>();
  for (const row of rows) {
    const fleets = projects.get(row.queued_project_id) ?? [];
    if (row.id !== null) fleets.push(toFleet(row));
    projects.set(row.queued_project_id, fleets);
  }
  return projects;
}

/** A queue's mark over the rows it aggregates: how many, and a 64-bit hash summed over each one's id and version. */
const MARK = (over: string) =>
  `count(*) ${over} || ':' || coalesce(sum(hashtextextended(id || ':' || xmin::text, 0)) ${over}, 0)`;

/**
 * What the queue holds now, in one value: any write to a queued run, a run joining or leaving it (falling due included)
 * changes it; an unchanged mark means the same runs at the same versions (a change goes unseen with a chance of 2^-64),
 * so the same order. It reads every queued row in the engine, as queueOrder does, but hands over one row, not one per run.
 */
export async function queueMark(db: Queryable): Promise<string> {
  const [row] = await db.query<{ mark: string }>(`SELECT ${MARK('')} AS mark FROM runs WHERE ${DUE_IN_QUEUE}`);
  return row!.mark;
}

/** The queue in the order it is placed (priority, then first come first served), and its mark (queueMark) as read with it. */
export async function queueOrder(db: Queryable): Promise<{ mark: string; entries: QueueEntry[] }> {
  const rows = await db.query<QueueEntry & { mark: string }>(
    `SELECT id, project_id, xmin::text AS version, ${MARK('OVER ()')} AS mark FROM runs WHERE ${DUE_IN_QUEUE} ORDER BY priority DESC, submitted_at, id`);
  return { mark: rows[0]?.mark ?? '0:0', entries: rows.map(({ id, project_id, version }) => ({ id, project_id, version })) };
}

export function queuedRunRows(db: Queryable, ids: string[]): Promise<QueuedRunRow[]> {
  return db.query<QueuedRunRow>(
    `SELECT id, desired, status_message, name, kind, replica, requirement, spec, coalesce(first_submitted_at, submitted_at) AS first_submitted_at FROM runs WHERE id = ANY($1::text[])`, [ids]);
}

export interface QueueReason {
  id: string;
  /** The version of the run the reason was worked out from: a run written since keeps its message until the next pass. */
  version: string;
  message: string;
}

/** Writes why each run still waits; returns the new version of each run written. */
export async function writeQueueReasons(db: Queryable, reasons: QueueReason[]): Promise<Map<string, string>> {
  const rows = await db.query<{ id: string; version: string }>(
    `UPDATE runs SET status_message = reason.message, updated_at = now()
     FROM (SELECT unnest($1::text[]) AS id, unnest($2::text[]) AS version, unnest($3::text[]) AS message) reason
     WHERE runs.id = reason.id AND runs.xmin::text = reason.version
     RETURNING runs.id, runs.xmin::text AS version`,
    [reasons.map((r) => r.id), reasons.map((r) => r.version), reasons.map((r) => r.message)]);
  return new Map(rows.map((r) => [r.id, r.version]));
}

/** Where a queued run was placed: its fleet, its instance, and the blocks of it when the fleet shares instances in blocks. */
export interface RunPlace {
  message: string;
  fleetId: string;
  instanceId: string;
  blocks: number[] | null;
}

/** A lease the placing write takes on the run for a loop of the placing server (its owner), to hold for `ms`. */
export interface PlacementLease {
  owner: string;
  ms: number;
}

/**
 * Marks a queued run placed (`provisioning`, due now) and records its event, in one statement. With `lease`, the same
 * write leases the run to that owner unless someone else holds it, so that the placing server starts it without a
 * claim; whether it did is in the returned row's `lease_owner`.
 */
export async function markPlaced(db: Queryable, id: string, place: RunPlace, lease: PlacementLease | null, event: EventInput): Promise<Row> {
  const free = `$6::text IS NOT NULL AND (lease_owner IS NULL OR lease_expires_at < now())`;
  const [row] = await db.query(plannedOnce(
    `WITH placed AS (UPDATE runs SET status = 'provisioning', status_message = $2, fleet_id = $3, instance_id = $4, blocks = $5::int[], next_reconcile_at = now(),
       lease_owner = CASE WHEN ${free} THEN $6 ELSE lease_owner END,
       lease_expires_at = CASE WHEN ${free} THEN now() + $7 * interval '1 millisecond' ELSE lease_expires_at END,
       updated_at = now()
     WHERE id = $1 RETURNING *), recorded AS (${INSERT_EVENT} SELECT $8, $9, $10, $11, $12, $13 FROM placed)
     SELECT * FROM placed`),
    [id, place.message, place.fleetId, place.instanceId, place.blocks, lease?.owner ?? null, lease?.ms ?? 0, ...eventParams(event)]);
  return row!;
}

/** The scheduler's lock: one scheduling pass at a time across servers. */
const SCHEDULER_LOCK = 4_243_002;

/** Takes the scheduler's lock for the rest of the transaction; false when another server's pass holds it. */
export async function trySchedulerLock(tx: Queryable): Promise<boolean> {
  const [{ locked }] = await tx.query<{ locked: boolean }>('SELECT pg_try_advisory_xact_lock($1) AS locked', [SCHEDULER_LOCK]);
  return locked;
}

/** How many of the project's queued runs a new run of `priority` would wait behind: those of the same priority or higher. */
export async function queuedAtOrAbove(db: Queryable, projectId: string, priority: number): Promise<number> {
  const [{ count }] = await db.query<{ count: number }>(
    `SELECT count(*)::int AS count FROM runs WHERE project_id = $1 AND status = 'submitted' AND NOT deleted AND priority >= $2`,
    [projectId, priority]);
  return count;
}

/** Says why a queued run waits, as its status message. */
export async function setQueuedRunMessage(db: Queryable, id: string, message: string): Promise<void> {
  await db.query(`UPDATE runs SET status_message = $2, updated_at = now() WHERE id = $1`, [id, message]);
}

/** A multi-node task whose nodes were all placed is provisioning, on `fleetId`, and due at once. */
export async function markNodesPlaced(db: Queryable, id: string, message: string, fleetId: string): Promise<void> {
  await db.query(
    `UPDATE runs SET status = 'provisioning', status_message = $2, fleet_id = $3, next_reconcile_at = now(), updated_at = now() WHERE id = $1`,
    [id, message, fleetId]);
}

/** A queued run ends without being placed: it cannot be (failed), or was stopped first (terminated). */
export async function finishUnplaced(db: Queryable, id: string, status: 'failed' | 'terminated', reason: string, message: string): Promise<void> {
  await db.query(
    `UPDATE runs SET status = $2, termination_reason = $3, status_message = $4, finished_at = now(), updated_at = now() WHERE id = $1`,
    [id, status, reason, message]);
}
