import type { RunNode } from '../api/objects.js';
import type { Queryable } from './db.js';
import { toRun, type RunRecord } from './runs.js';

/**
 * A task with `nodes` above 1 is a parent row, as a service is, and never gets a job itself: its nodes are runs
 * whose `service_id` (the parent run, whatever its kind) points at it and whose `replica` is their rank, each one
 * job. The scheduler places all of them in one transaction, the run controller starts and watches each one as it
 * does a task's job, and the nodes controller ends the parent when they end.
 */
export const MULTI_NODE_PARENT = `(kind = 'task' AND service_id IS NULL AND coalesce((spec->>'nodes')::int, 1) > 1)`;

/** A node of a multi-node task: only ever placed together with its siblings, never alone. */
export const NODE_JOB = `(kind = 'task' AND service_id IS NOT NULL)`;

export function nodeCount(spec: Record<string, unknown>): number {
  return typeof spec.nodes === 'number' ? spec.nodes : 1;
}

export function isMultiNodeParent(run: Pick<RunRecord, 'kind' | 'spec' | 'replica'>): boolean {
  return run.kind === 'task' && run.replica === null && nodeCount(run.spec) > 1;
}

export function isNodeJob(run: Pick<RunRecord, 'kind' | 'replica'>): boolean {
  return run.kind === 'task' && run.replica !== null;
}

export interface NodePlacement {
  /** The node's run id, which its instance was given as `run_id`. */
  id: string;
  rank: number;
  fleetId: string;
  instanceId: string;
  message: string;
}

/** Node `rank` of a parent just placed: a provisioning run with the parent's spec, inputs and attempt, on its instance. */
export async function insertNode(db: Queryable, parentId: string, node: NodePlacement): Promise<void> {
  await db.query(
    `INSERT INTO runs (id, project_id, user_id, name, kind, spec, files, repos, requirement, priority, generation, attempt, first_submitted_at,
       status, status_message, service_id, replica, fleet_id, instance_id)
     SELECT $2, project_id, user_id, name, kind, spec, files, repos, requirement, priority, generation, attempt, coalesce(first_submitted_at, submitted_at),
       'provisioning', $3, id, $4, $5, $6
     FROM runs WHERE id = $1`,
    [parentId, node.id, node.message, node.rank, node.fleetId, node.instanceId]);
}

/** The nodes of a multi-node task, in rank order. */
export async function listNodes(db: Queryable, parentId: string): Promise<RunRecord[]> {
  const rows = await db.query(`SELECT * FROM runs WHERE service_id = $1 AND NOT deleted ORDER BY replica`, [parentId]);
  return rows.map(toRun);
}

/**
 * The address each node's instance is reached at, in rank order: its address in its cluster's network, else its
 * agent's host; null while one has none yet. A node that already ran and ended keeps its address, so that a sibling
 * starting after it still learns it.
 */
export async function nodeAddresses(db: Queryable, parentId: string): Promise<string[] | null> {
  const rows = await db.query<{ agent_url: string | null; internal_ip: string | null }>(
    `SELECT i.agent_url, i.internal_ip FROM runs r LEFT JOIN instances i ON i.id = r.instance_id
     WHERE r.service_id = $1 AND NOT r.deleted ORDER BY r.replica`, [parentId]);
  if (rows.some((row) => !row.agent_url)) return null;
  return rows.map((row) => row.internal_ip ?? instanceAddress(row.agent_url!));
}

/**
 * What node `node` of a multi-node task waits for before its job starts, as its status message, or null when it may start:
 * with `startup_order: master-first` the others wait for node 0 to have started, with `workers-first` node 0 waits for
 * every other node to have started.
 */
export async function startupWait(db: Queryable, node: RunRecord): Promise<string | null> {
  const order = node.spec.startup_order;
  if (order !== 'master-first' && order !== 'workers-first') return null;
  if ((order === 'master-first') === (node.replica === 0)) return null;
  const rows = await db.query<{ replica: number }>(
    `SELECT replica FROM runs WHERE service_id = $1 AND NOT deleted AND started_at IS NULL AND replica ${order === 'master-first' ? '= 0' : '<> 0'}`, [node.parentId]);
  if (rows.length === 0) return null;
  return order === 'master-first'
    ? 'waiting for node 0 to start (startup_order: master-first)'
    : `waiting for node${rows.length === 1 ? '' : 's'} ${rows.map((row) => row.replica).join(', ')} to start (startup_order: workers-first)`;
}

/** An instance's address: the host its agent answers on, without an IPv6 literal's brackets. */
export function instanceAddress(agentUrl: string): string {
  return new URL(agentUrl).hostname.replace(/^\[(.*)\]$/, '$1');
}

export async function nodeViews(db: Queryable, parentId: string): Promise<RunNode[]> {
  const rows = await db.query(
    `SELECT r.*, i.name AS instance_name, i.offer AS instance_offer FROM runs r LEFT JOIN instances i ON i.id = r.instance_id
     WHERE r.service_id = $1 AND NOT r.deleted ORDER BY r.replica`, [parentId]);
  return rows.map((row) => {
    const node = toRun(row);
    return {
      rank: node.replica!, status: node.status, statusMessage: node.statusMessage, terminationReason: node.terminationReason,
      exitCode: node.exitCode, instance: row.instance_name ?? null, gpu: row.instance_offer?.gpu ?? null,
      pricePerHour: row.instance_offer?.pricePerHour ?? null,
      startedAt: node.startedAt?.toISOString() ?? null, finishedAt: node.finishedAt?.toISOString() ?? null,
    };
  });
}

/** Drops a multi-node task's node runs (all ended), as when the task goes back to the queue. */
export async function dropNodes(db: Queryable, parentId: string): Promise<void> {
  await db.query('UPDATE runs SET deleted = true WHERE service_id = $1', [parentId]);
}
