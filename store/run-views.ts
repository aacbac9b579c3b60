import { cronExpressions } from '../api/cron.js';
import type { Run, RunSsh } from '../api/objects.js';
import { serviceSettings, servicePaths } from '../api/service-settings.js';
import type { ServiceInfo } from '../api/services.js';
import type { ServiceSpec } from '../api/spec.js';
import { FINISHED_RUN_STATUSES } from '../api/status.js';
import type { Queryable, Row } from './db.js';
import { gatewayModelsUrl, gatewayOfService, gatewayUrl, listGateways, type GatewayRecord } from './gateways.js';
import { FINISHED, toRun } from './runs.js';
import { isMultiNodeParent, nodeViews } from './nodes.js';
import { replicaViews } from './services.js';

const VIEW_SELECT = `
  SELECT r.*, u.name AS user_name, p.name AS project_name, f.name AS fleet_name, i.name AS instance_name, i.offer AS instance_offer,
    i.ssh_host_key AS instance_ssh_host_key, s.name AS schedule_name,
    CASE WHEN r.kind = 'task' AND r.spec -> 'schedule' IS NOT NULL THEN (
      SELECT c.name FROM runs c WHERE c.schedule_id = r.id AND NOT c.deleted ORDER BY c.submitted_at DESC LIMIT 1)
    END AS schedule_last_run,
    CASE WHEN r.status = 'submitted' THEN (
      SELECT count(*)::int + 1 FROM runs q WHERE q.status = 'submitted' AND q.project_id = r.project_id AND NOT q.deleted
        AND (q.priority > r.priority OR (q.priority = r.priority AND (q.submitted_at, q.id) < (r.submitted_at, r.id))))
    END AS queue_position
  FROM runs r JOIN users u ON u.id = r.user_id JOIN projects p ON p.id = r.project_id
  LEFT JOIN fleets f ON f.id = r.fleet_id LEFT JOIN instances i ON i.id = r.instance_id LEFT JOIN runs s ON s.id = r.schedule_id`;

/**
 * The name known_hosts holds a run's host keys under. Run names and project names are DNS labels, which
 * have no dots, so no two runs or replicas share one.
 */
export function sshHostAlias(project: string, run: string, replica?: number): string {
  return ['orchestrator', project, run, ...(replica === undefined ? [] : [String(replica)])].join('.');
}

function runView(r: Row, service: ServiceInfo | null, ssh: RunSsh | null): Run {
  const run = toRun(r);
  return {
    id: run.id, project: r.project_name, user: r.user_name, name: run.name, kind: run.kind, status: run.status,
    statusMessage: run.statusMessage, terminationReason: run.terminationReason, priority: run.priority,
    generation: run.generation, attempt: run.attempt, spec: run.spec, fleet: r.fleet_name ?? null, instance: r.instance_name ?? null,
    gpu: r.instance_offer?.gpu ?? null, pricePerHour: r.instance_offer?.pricePerHour ?? null, exitCode: run.exitCode,
    queuePosition: r.queue_position ?? null, service, ssh, submittedAt: run.submittedAt.toISOString(),
    startedAt: run.startedAt?.toISOString() ?? null, finishedAt: run.finishedAt?.toISOString() ?? null,
    inactivityStopAt: run.status === 'running' ? run.inactivityStopAt?.toISOString() ?? null : null,
    ...scheduleParts(r),
  };
}

/** A scheduled task's `schedule`, or a run it submitted's `scheduledBy`; nothing for other runs. */
function scheduleParts(r: Row): Pick<Run, 'schedule' | 'scheduledBy'> {
  if (r.schedule_name) return { scheduledBy: { schedule: r.schedule_name, tick: r.scheduled_for.toISOString() } };
  if (r.kind !== 'task' || !r.spec.schedule) return {};
  return { schedule: { cron: cronExpressions(r.spec.schedule), nextRunAt: r.next_tick_at?.toISOString() ?? null, lastRun: r.schedule_last_run ?? null } };
}

export async function getRunView(db: Queryable, runId: string): Promise<Run> {
  return (await withServices(db, await db.query(`${VIEW_SELECT} WHERE r.id = $1`, [runId])))[0];
}

export async function listRunViews(db: Queryable, projectId: string, includeFinished: boolean, limit = 1000): Promise<Run[]> {
  const rows = await db.query(
    `${VIEW_SELECT} WHERE r.project_id = $1 AND NOT r.deleted AND r.service_id IS NULL AND ($2 OR r.status NOT IN ${FINISHED})
     ORDER BY r.submitted_at DESC LIMIT $3`, [projectId, includeFinished, limit]);
  return withServices(db, rows);
}

/** A running job's host: the key of its instance's agent, once that agent gave one. */
function taskSsh(r: Row): RunSsh | null {
  if (r.status !== 'running' || !r.instance_ssh_host_key) return null;
  return { hostAlias: sshHostAlias(r.project_name, r.name), hostKeys: [r.instance_ssh_host_key], replicas: [] };
}

/**
 * A service's running replicas (a multi-node task's running nodes) that can be reached; the run's own alias accepts
 * any of their keys. A replica runs (and may be ready) a moment before its service reads as running, and one may be
 * entered while none is ready.
 */
async function serviceSsh(db: Queryable, r: Row): Promise<RunSsh | null> {
  if (FINISHED_RUN_STATUSES.includes(r.status)) return null;
  const rows = await db.query<{ replica: number; ssh_host_key: string }>(
    `SELECT q.replica, i.ssh_host_key FROM runs q JOIN instances i ON i.id = q.instance_id
     WHERE q.service_id = $1 AND NOT q.deleted AND q.status = 'running' AND i.ssh_host_key IS NOT NULL ORDER BY q.replica`, [r.id]);
  if (rows.length === 0) return null;
  return {
    hostAlias: sshHostAlias(r.project_name, r.name),
    hostKeys: [...new Set(rows.map((row) => row.ssh_host_key))],
    replicas: rows.map((row) => ({ replica: row.replica, hostAlias: sshHostAlias(r.project_name, r.name, row.replica), hostKeys: [row.ssh_host_key] })),
  };
}

/** A multi-node task's view: its nodes, the GPUs of each, the price of all, and SSH into each. */
async function multiNodeView(db: Queryable, r: Row): Promise<Run> {
  const nodes = await nodeViews(db, r.id);
  const view = runView(r, null, await serviceSsh(db, r));
  if (nodes.length === 0) return view;
  const prices = nodes.map((node) => node.pricePerHour ?? 0);
  return { ...view, nodes, gpu: nodes[0]!.gpu, pricePerHour: nodes.some((node) => node.pricePerHour !== null) ? prices.reduce((a, b) => a + b, 0) : null };
}

/** Views of the rows, a service's with its replicas and paths, a multi-node task's with its nodes. */
async function withServices(db: Queryable, rows: Row[]): Promise<Run[]> {
  const gatewaysOf = new Map<string, Promise<GatewayRecord[]>>();
  const projectGateways = (projectId: string) => {
    if (!gatewaysOf.has(projectId)) gatewaysOf.set(projectId, listGateways(db, projectId));
    return gatewaysOf.get(projectId)!;
  };
  return Promise.all(rows.map(async (r) => {
    if (isMultiNodeParent(toRun(r))) return multiNodeView(db, r);
    if (r.kind !== 'service' || r.service_id !== null) return runView(r, null, taskSsh(r));
    const model = serviceSettings(r.spec as ServiceSpec).model?.name ?? null;
    const finished = FINISHED_RUN_STATUSES.includes(r.status);
    const spec = r.spec as ServiceSpec;
    const gateway = finished ? undefined : gatewayOfService(await projectGateways(r.project_id), spec);
    const service: ServiceInfo = {
      desiredReplicas: r.desired_replicas ?? 0,
      replicas: await replicaViews(db, r.id, finished),
      model,
      ...servicePaths(r.project_name, r.name, model),
      gatewayUrl: gateway ? gatewayUrl(gateway, r.name, spec.https) : null,
      gatewayModelUrl: gateway && model !== null ? gatewayModelsUrl(gateway) : null,
    };
    return runView(r, service, await serviceSsh(db, r));
  }));
}
