import { randomUUID } from 'node:crypto';
import type { JobRepo, JobSubmission } from '../api/agent.js';
import { formatUtc } from '../api/cron.js';
import type { ResourceRequirement } from '../api/resources.js';
import type { RunStatus, RunTerminationReason } from '../api/status.js';
import { plannedOnce, type Queryable, type Row } from './db.js';
import { eventParams, INSERT_EVENT, type EventInput } from './events.js';
import { RELEASE_INSTANCE } from './instances.js';
import { assignments, updateLeased } from './leases.js';

export type RunDesire = 'run' | 'stop' | 'abort';

export interface RunRecord {
  id: string;
  projectId: string;
  userId: string;
  name: string;
  kind: string;
  spec: Record<string, any>;
  files: JobSubmission['files'];
  /** The repos as the agent checks them out, one per entry of the spec's `repos`. */
  repos: JobRepo[];
  requirement: ResourceRequirement;
  generation: number;
  priority: number;
  status: RunStatus;
  statusMessage: string;
  terminationReason: RunTerminationReason | null;
  desired: RunDesire;
  fleetId: string | null;
  instanceId: string | null;
  /** The blocks of its instance the run holds (numbered from 0), when it shares the instance with others; null: the whole instance. */
  blocks: number[] | null;
  jobId: string | null;
  exitCode: number | null;
  /** The replica number of a service's replica, or the rank of a multi-node task's node; null for every other run. */
  replica: number | null;
  /** The service or multi-node task whose job this run is; null for a run of its own. */
  parentId: string | null;
  submittedAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
  /** A dev environment's stop time under inactivity_duration, as last seen; null while an SSH connection is open. */
  inactivityStopAt: Date | null;
  /** 1 for the first submission; each resubmission under `retry` is a new row with the next number. */
  attempt: number;
  /** When the first attempt was submitted: `retry.duration` counts from here. */
  firstSubmittedAt: Date;
  /** Since when every GPU of the run has stayed below utilization_policy's minimum, as last sampled; null when not. */
  gpuUnderusedSince: Date | null;
}

export const toRun = (r: Row): RunRecord => ({
  id: r.id, projectId: r.project_id, userId: r.user_id, name: r.name, kind: r.kind, spec: r.spec, files: r.files, repos: r.repos ?? [], requirement: r.requirement,
  generation: r.generation, priority: r.priority, status: r.status, statusMessage: r.status_message,
  terminationReason: r.termination_reason, desired: r.desired, fleetId: r.fleet_id, instanceId: r.instance_id, blocks: r.blocks ?? null,
  jobId: r.job_id, exitCode: r.exit_code, replica: r.replica ?? null, parentId: r.service_id ?? null, submittedAt: r.submitted_at, startedAt: r.started_at, finishedAt: r.finished_at,
  inactivityStopAt: r.inactivity_stop_at ?? null,
  attempt: r.attempt ?? 1, firstSubmittedAt: r.first_submitted_at ?? r.submitted_at, gpuUnderusedSince: r.gpu_underused_since ?? null,
});

/**
 * The columns of a run that a held run is read again with at each look (controllers/leased.ts, `heldColumns`): those of
 * WATCHED_RUN_COLUMNS but its spec and requirement, which change only with its generation; reading them at every look
 * was half of the read's cost.
 */
export const WATCHED_RUN_HELD_COLUMNS = `id, project_id, user_id, name, kind, generation, priority, status, status_message,
  termination_reason, desired, fleet_id, instance_id, blocks, job_id, exit_code, replica, service_id, submitted_at, started_at,
  finished_at, inactivity_stop_at, attempt, first_submitted_at, gpu_underused_since`;

/**
 * The columns of a run that a look at its running job reads (toRun's, which maps each): all but `files` and `repos`,
 * what its job was started with, which may weigh megabytes and which a look never needs.
 */
export const WATCHED_RUN_COLUMNS = `spec, requirement, ${WATCHED_RUN_HELD_COLUMNS}`;

export const FINISHED = `('terminated', 'failed', 'done')`;

/** A scheduled task's status message while it waits. */
export function nextRunMessage(nextTickAt: Date): string {
  return `next run at ${formatUtc(nextTickAt)}`;
}

export interface NewRun {
  projectId: string;
  userId: string;
  name: string;
  kind: string;
  spec: Record<string, unknown>;
  files: JobSubmission['files'];
  repos?: JobRepo[];
  requirement: ResourceRequirement;
  priority: number;
  /** A scheduled task: it waits as `pending` until then, and its schedule controller submits its runs. */
  nextTickAt?: Date;
  /** The run's event, recorded in the statement that inserts it. */
  event?: { reason: string; message: string };
}

/**
 * Submits a run. A finished run of the same name is replaced; a live one, or one submitted at the same moment, is a
 * conflict (null). A new name, the common case, takes one statement: the name's holder is looked at only when it has one.
 */
export async function insertRun(db: Queryable, n: NewRun): Promise<RunRecord | null> {
  const inserted = await insertRunRow(db, n);
  if (inserted) return inserted;
  const live = await db.query(`SELECT id, status FROM runs WHERE project_id = $1 AND name = $2 AND NOT deleted AND service_id IS NULL`, [n.projectId, n.name]);
  if (live[0] && !['terminated', 'failed', 'done'].includes(live[0].status)) return null;
  if (live[0]) await db.query('UPDATE runs SET deleted = true WHERE id = $1', [live[0].id]);
  return insertRunRow(db, n);
}

async function insertRunRow(db: Queryable, n: NewRun): Promise<RunRecord | null> {
  const rows = await db.query(plannedOnce(
    `WITH inserted AS (
       INSERT INTO runs (id, project_id, user_id, name, kind, spec, files, repos, requirement, priority, status, status_message, next_tick_at, next_reconcile_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $10, $8, $9, $11, $12, $13, coalesce($13, now()))
       ON CONFLICT (project_id, name) WHERE NOT deleted AND service_id IS NULL DO NOTHING RETURNING *),
     recorded AS (${INSERT_EVENT} SELECT project_id, 'run', id, name, $14, $15 FROM inserted WHERE $14::text IS NOT NULL)
     SELECT * FROM inserted`),
    [randomUUID(), n.projectId, n.userId, n.name, n.kind, n.spec, n.files, n.requirement, n.priority, n.repos ?? [],
      n.nextTickAt ? 'pending' : 'submitted', n.nextTickAt ? nextRunMessage(n.nextTickAt) : 'waiting to be scheduled', n.nextTickAt ?? null,
      n.event?.reason ?? null, n.event?.message ?? null]);
  return rows[0] ? toRun(rows[0]) : null;
}

/**
 * Submits the next attempt of a failed run under `retry`: a new row with the same spec, files and name and its own
 * logs, which replaces the failed one as a re-apply would. Null when the name was taken meanwhile (a new apply).
 */
export async function insertRetryAttempt(db: Queryable, failed: RunRecord, message: string): Promise<RunRecord | null> {
  const replaced = await db.query('UPDATE runs SET deleted = true WHERE id = $1 AND NOT deleted RETURNING id', [failed.id]);
  if (replaced.length === 0) return null;
  const rows = await db.query(
    `INSERT INTO runs (id, project_id, user_id, name, kind, spec, files, repos, requirement, generation, priority, status, status_message, attempt, first_submitted_at,
       schedule_id, scheduled_for)
     SELECT $2, project_id, user_id, name, kind, spec, files, repos, requirement, generation, priority, 'submitted', $3, attempt + 1, coalesce(first_submitted_at, submitted_at),
       schedule_id, scheduled_for
     FROM runs WHERE id = $1
     ON CONFLICT (project_id, name) WHERE NOT deleted AND service_id IS NULL DO NOTHING RETURNING *`,
    [failed.id, randomUUID(), message]);
  return rows[0] ? toRun(rows[0]) : null;
}

export async function getRunByName(db: Queryable, projectId: string, name: string): Promise<RunRecord | null> {
  const rows = await db.query('SELECT * FROM runs WHERE project_id = $1 AND name = $2 AND NOT deleted AND service_id IS NULL', [projectId, name]);
  return rows[0] ? toRun(rows[0]) : null;
}

/** Another attempt of `run` under its `retry`: the row of that number among those submitted since its first attempt. */
export async function getRunAttempt(db: Queryable, run: RunRecord, attempt: number): Promise<RunRecord | null> {
  const rows = await db.query(
    `SELECT * FROM runs WHERE project_id = $1 AND name = $2 AND attempt = $3 AND service_id IS NULL
       AND coalesce(first_submitted_at, submitted_at) = (SELECT coalesce(first_submitted_at, submitted_at) FROM runs WHERE id = $4)
     ORDER BY submitted_at DESC LIMIT 1`,
    [run.projectId, run.name, attempt, run.id]);
  return rows[0] ? toRun(rows[0]) : null;
}

/** Which of `ids` are runs of the project: what a report from outside (a gateway's) may speak of. */
export async function projectRunIds(db: Queryable, projectId: string, ids: readonly string[]): Promise<Set<string>> {
  return new Set((await db.query<{ id: string }>('SELECT id FROM runs WHERE id = ANY($1::text[]) AND project_id = $2', [ids, projectId])).map((r) => r.id));
}

export async function getRun(db: Queryable, id: string): Promise<RunRecord | null> {
  const rows = await db.query(plannedOnce('SELECT * FROM runs WHERE id = $1'), [id]);
  return rows[0] ? toRun(rows[0]) : null;
}

/** The user asks a run to stop (or abort); the run controller carries it out. */
export async function requestRunStop(db: Queryable, runId: string, abort: boolean): Promise<void> {
  await db.query(
    `UPDATE runs SET desired = $2, next_reconcile_at = now(), updated_at = now() WHERE id = $1 AND status NOT IN ${FINISHED}`,
    [runId, abort ? 'abort' : 'stop']);
}

export async function deleteRun(db: Queryable, runId: string): Promise<boolean> {
  const rows = await db.query(`UPDATE runs SET deleted = true WHERE id = $1 AND status IN ${FINISHED} RETURNING id`, [runId]);
  if (rows.length > 0) await db.query(`UPDATE runs SET deleted = true WHERE service_id = $1`, [runId]);
  return rows.length > 0;
}

type RunColumn = 'status' | 'status_message' | 'termination_reason' | 'fleet_id' | 'instance_id' | 'job_id' | 'exit_code'
  | 'started_at' | 'finished_at' | 'inactivity_stop_at' | 'gpu_underused_since';

/** How writeRunStep ends the step besides writing the run and its event. */
export interface RunStepOptions {
  /** Gives the lease back with the write, the run due at once (for the loop that takes it over). */
  handOver?: boolean;
  /** Gives this instance back from the run (idle again) with the write, where the run still holds it. */
  releaseInstance?: string | null;
}

/**
 * A run's step in one statement: its changes written while `owner` still holds its lease, and its event with them, or
 * neither (false: the lease was lost). On PGlite each statement costs the server's thread about as much as a small
 * one's work, so a step that took three to five statements (a transaction's two included) takes one.
 */
export async function writeRunStep(db: Queryable, id: string, owner: string, patch: Partial<Record<RunColumn, unknown>>, event: EventInput, options: RunStepOptions = {}): Promise<boolean> {
  const params: unknown[] = [id, owner, ...eventParams(event)];
  const sets = [...assignments(patch, params), ...(options.handOver ? ['lease_owner = NULL, lease_expires_at = NULL, next_reconcile_at = now()'] : [])];
  const release = options.releaseInstance
    ? `, released AS (${RELEASE_INSTANCE} WHERE id = $${params.push(options.releaseInstance)} AND run_id = $1 AND EXISTS (SELECT 1 FROM written))`
    : '';
  const rows = await db.query(plannedOnce(
    `WITH written AS (UPDATE runs SET ${sets.join(', ')}, updated_at = now() WHERE id = $1 AND lease_owner = $2 RETURNING id)${release}
     ${INSERT_EVENT} SELECT $3, $4, $5, $6, $7, $8 FROM written RETURNING id`), params);
  return rows.length > 0;
}

/** Writes the changes only while `owner` still holds the run's lease; false when it lost it. */
export function updateRun(db: Queryable, id: string, owner: string, patch: Partial<Record<RunColumn, unknown>>): Promise<boolean> {
  return updateLeased<RunColumn>(db, 'runs', id, owner, patch);
}

/** The blocks of each shared instance that live runs hold, by instance id. */
export type BlocksHeld = Map<string, number[]>;

export async function blocksHeld(db: Queryable, projectId: string): Promise<BlocksHeld> {
  const rows = await db.query<{ instance_id: string; blocks: number[] }>(
    `SELECT instance_id, blocks FROM runs WHERE project_id = $1 AND blocks IS NOT NULL AND instance_id IS NOT NULL AND status NOT IN ${FINISHED}`, [projectId]);
  const held: BlocksHeld = new Map();
  for (const row of rows) held.set(row.instance_id, [...(held.get(row.instance_id) ?? []), ...row.blocks]);
  return held;
}

/**
 * A run goes back to the queue, as before it was placed (no instance, fleet or blocks), to be placed again after
 * `backoffMs`, while `owner` holds its lease; false when it lost it.
 */
export async function requeueRun(db: Queryable, id: string, owner: string, message: string, backoffMs: number): Promise<boolean> {
  const rows = await db.query(
    `UPDATE runs SET status = 'submitted', status_message = $3, instance_id = NULL, fleet_id = NULL, blocks = NULL,
       next_reconcile_at = now() + $4 * interval '1 millisecond', updated_at = now()
     WHERE id = $1 AND lease_owner = $2 RETURNING id`, [id, owner, message, backoffMs]);
  return rows.length > 0;
}
