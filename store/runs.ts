import { randomUUID } from 'node:crypto';
import type { JobSubmission } from '../api/agent.js';
import type { Run } from '../api/objects.js';
import type { ResourceRequirement } from '../api/resources.js';
import type { RunStatus, RunTerminationReason } from '../api/status.js';
import type { Queryable, Row } from './db.js';
import { updateLeased } from './leases.js';

export type RunDesire = 'run' | 'stop' | 'abort';

export interface RunRecord {
  id: string;
  projectId: string;
  userId: string;
  name: string;
  kind: string;
  spec: Record<string, any>;
  files: JobSubmission['files'];
  requirement: ResourceRequirement;
  generation: number;
  priority: number;
  status: RunStatus;
  statusMessage: string;
  terminationReason: RunTerminationReason | null;
  desired: RunDesire;
  fleetId: string | null;
  instanceId: string | null;
  jobId: string | null;
  exitCode: number | null;
  submittedAt: Date;
  startedAt: Date | null;
  finishedAt: Date | null;
}

export const toRun = (r: Row): RunRecord => ({
  id: r.id, projectId: r.project_id, userId: r.user_id, name: r.name, kind: r.kind, spec: r.spec, files: r.files, requirement: r.requirement,
  generation: r.generation, priority: r.priority, status: r.status, statusMessage: r.status_message,
  terminationReason: r.termination_reason, desired: r.desired, fleetId: r.fleet_id, instanceId: r.instance_id,
  jobId: r.job_id, exitCode: r.exit_code, submittedAt: r.submitted_at, startedAt: r.started_at, finishedAt: r.finished_at,
});

const FINISHED = `('terminated', 'failed', 'done')`;

export interface NewRun {
  projectId: string;
  userId: string;
  name: string;
  kind: string;
  spec: Record<string, unknown>;
  files: JobSubmission['files'];
  requirement: ResourceRequirement;
  priority: number;
}

/** Submits a run. A finished run of the same name is replaced; a live one, or one submitted at the same moment, is a conflict (null). */
export async function insertRun(db: Queryable, n: NewRun): Promise<RunRecord | null> {
  const live = await db.query(`SELECT id, status FROM runs WHERE project_id = $1 AND name = $2 AND NOT deleted`, [n.projectId, n.name]);
  if (live[0] && !['terminated', 'failed', 'done'].includes(live[0].status)) return null;
  if (live[0]) await db.query('UPDATE runs SET deleted = true WHERE id = $1', [live[0].id]);
  const rows = await db.query(
    `INSERT INTO runs (id, project_id, user_id, name, kind, spec, files, requirement, priority, status, status_message)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'submitted', 'waiting to be scheduled')
     ON CONFLICT (project_id, name) WHERE NOT deleted DO NOTHING RETURNING *`,
    [randomUUID(), n.projectId, n.userId, n.name, n.kind, n.spec, n.files, n.requirement, n.priority]);
  return rows[0] ? toRun(rows[0]) : null;
}

export async function getRunByName(db: Queryable, projectId: string, name: string): Promise<RunRecord | null> {
  const rows = await db.query('SELECT * FROM runs WHERE project_id = $1 AND name = $2 AND NOT deleted', [projectId, name]);
  return rows[0] ? toRun(rows[0]) : null;
}

export async function getRun(db: Queryable, id: string): Promise<RunRecord | null> {
  const rows = await db.query('SELECT * FROM runs WHERE id = $1', [id]);
  return rows[0] ? toRun(rows[0]) : null;
}

const VIEW_SELECT = `
  SELECT r.*, u.name AS user_name, p.name AS project_name, f.name AS fleet_name, i.name AS instance_name, i.offer AS instance_offer,
    CASE WHEN r.status = 'submitted' THEN (
      SELECT count(*)::int + 1 FROM runs q WHERE q.status = 'submitted' AND q.project_id = r.project_id AND NOT q.deleted
        AND (q.priority > r.priority OR (q.priority = r.priority AND (q.submitted_at, q.id) < (r.submitted_at, r.id))))
    END AS queue_position
  FROM runs r JOIN users u ON u.id = r.user_id JOIN projects p ON p.id = r.project_id
  LEFT JOIN fleets f ON f.id = r.fleet_id LEFT JOIN instances i ON i.id = r.instance_id`;

function runView(r: Row): Run {
  const run = toRun(r);
  return {
    id: run.id, project: r.project_name, user: r.user_name, name: run.name, kind: run.kind, status: run.status,
    statusMessage: run.statusMessage, terminationReason: run.terminationReason, priority: run.priority,
    generation: run.generation, spec: run.spec, fleet: r.fleet_name ?? null, instance: r.instance_name ?? null,
    gpu: r.instance_offer?.gpu ?? null, pricePerHour: r.instance_offer?.pricePerHour ?? null, exitCode: run.exitCode,
    queuePosition: r.queue_position ?? null, submittedAt: run.submittedAt.toISOString(),
    startedAt: run.startedAt?.toISOString() ?? null, finishedAt: run.finishedAt?.toISOString() ?? null,
  };
}

export async function getRunView(db: Queryable, runId: string): Promise<Run> {
  return runView((await db.query(`${VIEW_SELECT} WHERE r.id = $1`, [runId]))[0]);
}

export async function listRunViews(db: Queryable, projectId: string, includeFinished: boolean, limit = 1000): Promise<Run[]> {
  const rows = await db.query(
    `${VIEW_SELECT} WHERE r.project_id = $1 AND NOT r.deleted AND ($2 OR r.status NOT IN ${FINISHED})
     ORDER BY r.submitted_at DESC LIMIT $3`, [projectId, includeFinished, limit]);
  return rows.map(runView);
}

/** The user asks a run to stop (or abort); the run controller carries it out. */
export async function requestRunStop(db: Queryable, runId: string, abort: boolean): Promise<void> {
  await db.query(
    `UPDATE runs SET desired = $2, next_reconcile_at = now(), updated_at = now() WHERE id = $1 AND status NOT IN ${FINISHED}`,
    [runId, abort ? 'abort' : 'stop']);
}

export async function deleteRun(db: Queryable, runId: string): Promise<boolean> {
  const rows = await db.query(`UPDATE runs SET deleted = true WHERE id = $1 AND status IN ${FINISHED} RETURNING id`, [runId]);
  return rows.length > 0;
}

type RunColumn = 'status' | 'status_message' | 'termination_reason' | 'fleet_id' | 'instance_id' | 'job_id' | 'exit_code'
  | 'started_at' | 'finished_at';

/** Writes the changes only while `owner` still holds the run's lease; false when it lost it. */
export function updateRun(db: Queryable, id: string, owner: string, patch: Partial<Record<RunColumn, unknown>>): Promise<boolean> {
  return updateLeased<RunColumn>(db, 'runs', id, owner, patch);
}
