import { cronExpressions } from '../api/cron.js';
import { RUN_LIST_LIMIT, type Run, type RunSsh } from '../api/objects.js';
import { serviceSettings, servicePaths } from '../api/service-settings.js';
import type { ServiceInfo } from '../api/services.js';
import type { ServiceSpec } from '../api/spec.js';
import { FINISHED_RUN_STATUSES } from '../api/status.js';
import { plannedOnce, type Queryable, type Row } from './db.js';
import { gatewayModelsUrl, gatewayOfService, gatewayUrl, listGateways, type GatewayRecord } from './gateways.js';
import { FINISHED, toRun } from './runs.js';
import { runCosts } from './ledger.js';
import { isMultiNodeParent, nodeViews } from './nodes.js';
import { replicaViewsOf } from './services.js';

/** Only the columns a view is made of: PGlite decodes every column of every row in JavaScript, a list's main cost. */
const VIEW_COLUMNS = `
    r.id, r.project_id, r.name, r.kind, r.spec, r.status, r.status_message, r.termination_reason, r.priority,
    r.generation, r.attempt, r.exit_code, r.submitted_at, r.started_at, r.finished_at, r.inactivity_stop_at, r.service_id,
    r.replica, r.desired_replicas, r.stable_generation, r.rollout_stall, r.scheduled_for, r.next_tick_at, u.name AS user_name, p.name AS project_name, f.name AS fleet_name, i.name AS instance_name, i.offer AS instance_offer,
    i.ssh_host_key AS instance_ssh_host_key, s.name AS schedule_name, CASE WHEN NOT s.deleted THEN s.name END AS published_as,
    CASE WHEN r.spec -> 'schedule' IS NOT NULL THEN (
      SELECT c.name FROM runs c WHERE c.schedule_id = r.id AND NOT c.deleted ORDER BY c.submitted_at DESC LIMIT 1)
    END AS schedule_last_run`;
/** What a view joins to its run `r`. */
const VIEW_JOINS = `
  JOIN users u ON u.id = r.user_id JOIN projects p ON p.id = r.project_id
  LEFT JOIN fleets f ON f.id = r.fleet_id LEFT JOIN instances i ON i.id = r.instance_id LEFT JOIN runs s ON s.id = r.schedule_id`;
const VIEW_SELECT = `SELECT ${VIEW_COLUMNS} FROM runs r ${VIEW_JOINS}`;

/**
 * The name known_hosts holds a run's host keys under. Run names and project names are DNS labels, which
 * have no dots, so no two runs or replicas share one.
 */
export function sshHostAlias(project: string, run: string, replica?: number): string {
  return ['orchestrator', project, run, ...(replica === undefined ? [] : [String(replica)])].join('.');
}

function runView(r: Row, service: ServiceInfo | null, ssh: RunSsh | null, queuePosition: number | null, cost: number): Run {
  const run = toRun(r);
  return {
    id: run.id, project: r.project_name, user: r.user_name, name: run.name, kind: run.kind, status: run.status,
    statusMessage: run.statusMessage, terminationReason: run.terminationReason, priority: run.priority,
    generation: run.generation, attempt: run.attempt, spec: run.spec, fleet: r.fleet_name ?? null, instance: r.instance_name ?? null,
    gpu: r.instance_offer?.gpu ?? null, pricePerHour: r.instance_offer?.pricePerHour ?? null, cost, exitCode: run.exitCode,
    queuePosition, service, ssh, submittedAt: run.submittedAt.toISOString(),
    startedAt: run.startedAt?.toISOString() ?? null, finishedAt: run.finishedAt?.toISOString() ?? null,
    inactivityStopAt: run.status === 'running' ? run.inactivityStopAt?.toISOString() ?? null : null,
    ...scheduleParts(r),
  };
}

/** A schedule's `schedule`, or a run it submitted's `scheduledBy`; nothing for other runs. */
function scheduleParts(r: Row): Pick<Run, 'schedule' | 'scheduledBy'> {
  if (r.schedule_name) return { scheduledBy: { schedule: r.schedule_name, tick: r.scheduled_for.toISOString() } };
  if (!r.spec.schedule) return {};
  return { schedule: { cron: cronExpressions(r.spec.schedule), nextRunAt: r.next_tick_at?.toISOString() ?? null, lastRun: r.schedule_last_run ?? null } };
}

export async function getRunView(db: Queryable, runId: string): Promise<Run> {
  return (await withServices(db, await db.query(plannedOnce(`${VIEW_SELECT} WHERE r.id = $1`), [runId])))[0];
}

export async function listRunViews(db: Queryable, projectId: string, includeFinished: boolean, limit = RUN_LIST_LIMIT): Promise<Run[]> {
  // The runs listed are chosen from their own narrow rows before anything is joined to them: joined first, every live
  // run of the project was (bench/README.md, "The run list: its runs chosen before they are joined"). The active list's
  // condition is written out, not a parameter, so that it implies the predicate of runs_listed_active (migration 30),
  // which hands it its runs in order, whatever the plan.
  const rows = await db.query(
    `SELECT ${VIEW_COLUMNS} FROM (
       SELECT id FROM runs WHERE project_id = $1 AND NOT deleted AND service_id IS NULL ${includeFinished ? '' : `AND status NOT IN ${FINISHED}`}
       ORDER BY submitted_at DESC, id DESC LIMIT $2) listed
     JOIN runs r ON r.id = listed.id ${VIEW_JOINS}
     ORDER BY r.submitted_at DESC, r.id DESC`, [projectId, limit]);
  return withServices(db, rows);
}

/** The views of the runs with these ids (deleted ones included, as they were last). */
export async function runViewsOf(db: Queryable, runIds: readonly string[]): Promise<Run[]> {
  if (runIds.length === 0) return [];
  return withServices(db, await db.query(`${VIEW_SELECT} WHERE r.id = ANY($1::text[])`, [runIds]));
}

/** A run of the project's list and the version of what its view is read from. */
export interface RunViewVersion {
  id: string;
  version: string;
}

/**
 * The project's newest runs (as listRunViews lists them, finished ones included), each with a version that changes
 * whenever its view may: a write to the run, its instance or any of its replicas or nodes (their `xmin`), its place in
 * the queue, its cost while the ledger still counts it, its schedule's last run. A narrow read (and the queue's order,
 * apart: joined in, the planner may rank the queue once per run), so that a list followed live reads again the views
 * of the runs that changed, not of all of them. Gateways are not in it.
 */
export async function runViewVersions(db: Queryable, projectId: string, limit: number): Promise<RunViewVersion[]> {
  const rows = await db.query(
    `SELECT r.id, r.project_id, r.status, concat_ws('/', r.xmin::text, i.xmin::text,
       (SELECT count(*) || ':' || max(c.xmin::text::bigint) || ':' || max(ci.xmin::text::bigint)
        FROM runs c LEFT JOIN instances ci ON ci.id = c.instance_id WHERE c.service_id = r.id AND NOT c.deleted),
       CASE WHEN r.status <> 'submitted' AND (r.finished_at IS NULL OR r.finished_at > now() - interval '1 hour')
         THEN (SELECT sum(h.dollars) FROM cost_hours h WHERE h.run_id = r.id) END,
       CASE WHEN r.spec -> 'schedule' IS NOT NULL
         THEN (SELECT max(c.submitted_at)::text FROM runs c WHERE c.schedule_id = r.id AND NOT c.deleted) END) AS version
     FROM runs r LEFT JOIN instances i ON i.id = r.instance_id
     WHERE r.project_id = $1 AND NOT r.deleted AND r.service_id IS NULL
     ORDER BY r.submitted_at DESC, r.id DESC LIMIT $2`, [projectId, limit]);
  const positions = await queuePositions(db, rows);
  return rows.map((r) => ({ id: r.id, version: `${r.version}/${positions.get(r.id) ?? ''}` }));
}

/**
 * Each submitted run of `rows`'s place in its project's queue (1 is taken next), in the scheduler's order: one read of
 * the queue rather than a count for each run, answering with those runs' places only (an apply's answer wants one
 * place, where its project may have thousands waiting).
 */
async function queuePositions(db: Queryable, rows: Row[]): Promise<Map<string, number>> {
  const submitted = rows.filter((r) => r.status === 'submitted');
  if (submitted.length === 0) return new Map();
  const projects = [...new Set(submitted.map((r) => r.project_id as string))];
  const queued = await db.query<{ id: string; position: number }>(
    `SELECT id, position FROM (
       SELECT id, row_number() OVER (PARTITION BY project_id ORDER BY priority DESC, submitted_at, id)::int AS position
       FROM runs WHERE project_id = ANY($1::text[]) AND status = 'submitted' AND NOT deleted) queue
     WHERE id = ANY($2::text[])`, [projects, submitted.map((r) => r.id as string)]);
  return new Map(queued.map((row) => [row.id, row.position]));
}

/** A running job's host: the key of its instance's agent, once that agent gave one. */
function taskSsh(r: Row): RunSsh | null {
  if (r.status !== 'running' || !r.instance_ssh_host_key) return null;
  return { hostAlias: sshHostAlias(r.project_name, r.name), hostKeys: [r.instance_ssh_host_key], replicas: [] };
}

/** A running replica of a service (or node of a multi-node task) and its agent's host key. */
interface ReachableJob {
  service_id: string;
  replica: number;
  ssh_host_key: string;
}

/** The running replicas (nodes) of each parent that can be reached, by parent id, in one query. */
async function reachableJobsOf(db: Queryable, parentIds: readonly string[]): Promise<Map<string, ReachableJob[]>> {
  const reachable = new Map<string, ReachableJob[]>(parentIds.map((id) => [id, []]));
  if (parentIds.length === 0) return reachable;
  const rows = await db.query<ReachableJob>(
    `SELECT q.service_id, q.replica, i.ssh_host_key FROM runs q JOIN instances i ON i.id = q.instance_id
     WHERE q.service_id = ANY($1::text[]) AND NOT q.deleted AND q.status = 'running' AND i.ssh_host_key IS NOT NULL ORDER BY q.replica`, [parentIds]);
  for (const row of rows) reachable.get(row.service_id)!.push(row);
  return reachable;
}

/**
 * A live service's running replicas (a multi-node task's running nodes) that can be reached; the run's own alias accepts
 * any of their keys. A replica runs (and may be ready) a moment before its service reads as running, and one may be
 * entered while none is ready.
 */
function parentSsh(r: Row, jobs: readonly ReachableJob[]): RunSsh | null {
  if (jobs.length === 0) return null;
  return {
    hostAlias: sshHostAlias(r.project_name, r.name),
    hostKeys: [...new Set(jobs.map((job) => job.ssh_host_key))],
    replicas: jobs.map((job) => ({ replica: job.replica, hostAlias: sshHostAlias(r.project_name, r.name, job.replica), hostKeys: [job.ssh_host_key] })),
  };
}

/** A multi-node task's view: its nodes, the GPUs of each, the price of all, and SSH into each. */
async function multiNodeView(db: Queryable, r: Row, ssh: RunSsh | null, queuePosition: number | null, cost: number): Promise<Run> {
  const nodes = await nodeViews(db, r.id);
  const view = runView(r, null, ssh, queuePosition, cost);
  if (nodes.length === 0) return view;
  const prices = nodes.map((node) => node.pricePerHour ?? 0);
  return { ...view, nodes, gpu: nodes[0]!.gpu, pricePerHour: nodes.some((node) => node.pricePerHour !== null) ? prices.reduce((a, b) => a + b, 0) : null };
}

/**
 * Views of the rows, a service's with its replicas and paths, a multi-node task's with its nodes. What every row
 * needs from other rows (queue positions, replicas, reachable jobs, gateways) is read once for all of them.
 */
async function withServices(db: Queryable, rows: Row[]): Promise<Run[]> {
  // A schedule of a service is no service itself: the runs it submits are.
  const isService = (r: Row) => r.kind === 'service' && r.service_id === null && !r.spec.schedule;
  const multiNode = new Set(rows.filter((r) => isMultiNodeParent(toRun(r))).map((r) => r.id as string));
  const finished = (r: Row) => FINISHED_RUN_STATUSES.includes(r.status);
  const services = rows.filter(isService);
  const [positions, replicas, reachable, costs] = await Promise.all([
    queuePositions(db, rows),
    replicaViewsOf(db, services.map((r) => r.id as string), services.filter(finished).map((r) => r.id as string)),
    reachableJobsOf(db, rows.filter((r) => (isService(r) || multiNode.has(r.id)) && !finished(r)).map((r) => r.id as string)),
    runCosts(db, rows.map((r) => r.id as string)),
  ]);
  const gatewaysOf = new Map<string, Promise<GatewayRecord[]>>();
  const projectGateways = (projectId: string) => {
    if (!gatewaysOf.has(projectId)) gatewaysOf.set(projectId, listGateways(db, projectId));
    return gatewaysOf.get(projectId)!;
  };
  return Promise.all(rows.map(async (r) => {
    const position = positions.get(r.id) ?? null;
    const cost = costs.get(r.id) ?? 0;
    if (multiNode.has(r.id)) return multiNodeView(db, r, parentSsh(r, reachable.get(r.id) ?? []), position, cost);
    if (!isService(r)) return runView(r, null, taskSsh(r), position, cost);
    const model = serviceSettings(r.spec as ServiceSpec).model?.name ?? null;
    const spec = r.spec as ServiceSpec;
    const gateway = finished(r) ? undefined : gatewayOfService(await projectGateways(r.project_id), spec);
    const service: ServiceInfo = {
      desiredReplicas: r.desired_replicas ?? 0,
      replicas: replicas.get(r.id) ?? [],
      stableGeneration: r.stable_generation ?? null,
      stall: r.rollout_stall ?? null,
      model,
      // Published under its schedule's name while that schedule holds it (store/services.ts#loadRoutingTable).
      ...servicePaths(r.project_name, r.published_as ?? r.name, model),
      gatewayUrl: gateway ? gatewayUrl(gateway, r.published_as ?? r.name, spec.https) : null,
      gatewayModelUrl: gateway && model !== null ? gatewayModelsUrl(gateway) : null,
    };
    return runView(r, service, parentSsh(r, reachable.get(r.id) ?? []), position, cost);
  }));
}
