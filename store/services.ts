import { randomUUID } from 'node:crypto';
import { groupSpec, replicaGroupsOf } from '../api/replica-groups.js';
import { normalizeResources } from '../api/resources.js';
import { serviceSettings } from '../api/service-settings.js';
import type { Replica, ReplicaState, RolloutStall, ServiceRoute } from '../api/services.js';
import type { ServiceSpec } from '../api/spec.js';
import { FINISHED_RUN_STATUSES } from '../api/status.js';
import type { Queryable, Row } from './db.js';
import { FINISHED, toRun, type RunRecord } from './runs.js';

/** A service run is a parent row; its replicas are runs with `service_id` set, each one job placed like a task. */
export const SERVICE_PARENT = `(kind = 'service' AND service_id IS NULL)`;

export interface ReplicaRecord extends RunRecord {
  serviceId: string;
  replica: number;
  /** Its replica group's name; null for a service without groups. */
  group: string | null;
  /** The service spec of its generation (a replica of a group runs that group's spec, its `spec`). */
  serviceSpec: Record<string, unknown>;
  readyAt: Date | null;
  drainingSince: Date | null;
  /** When the service controller took note of the replica's end (and replaced it where needed). */
  replacedAt: Date | null;
}

/** A service's row as its controller reads it: the run, and where its replica set stands. */
export interface ServiceRecord extends RunRecord {
  /** Over all replica groups together. */
  desiredReplicas: number | null;
  scaledAt: Date | null;
  /** Each replica group's own count and when it last changed; empty for a service without groups. */
  groupReplicas: Record<string, GroupScale>;
  /** Replicas of the current generation that ended (or were stopped unready) in a row since one was last ready. */
  replicaFailures: number;
  /** The last generation whose replicas were all ready; null while none has been. */
  stableGeneration: number | null;
  stall: RolloutStall | null;
}

/** Where one replica group's count stands: what it aims for, and since when (ISO time). */
export interface GroupScale {
  desired: number;
  scaledAt: string;
}

export function toService(row: Record<string, any>): ServiceRecord {
  return {
    ...toRun(row), desiredReplicas: row.desired_replicas, scaledAt: row.scaled_at, groupReplicas: row.group_replicas ?? {}, replicaFailures: row.replica_failures,
    stableGeneration: row.stable_generation ?? null, stall: row.rollout_stall ?? null,
  };
}

export function toReplica(row: Record<string, any>): ReplicaRecord {
  return {
    ...toRun(row), serviceId: row.service_id, replica: row.replica, group: row.replica_group ?? null, serviceSpec: row.service_spec ?? row.spec, readyAt: row.ready_at, drainingSince: row.draining_since, replacedAt: row.replaced_at,
  };
}

export function replicaState(r: Pick<ReplicaRecord, 'status' | 'readyAt' | 'drainingSince'>): ReplicaState {
  if (FINISHED_RUN_STATUSES.includes(r.status)) return 'terminated';
  if (r.drainingSince || r.status === 'terminating') return 'draining';
  if (r.status === 'running') return r.readyAt ? 'ready' : 'starting';
  return 'provisioning';
}

/** Every replica of a service that has not been deleted, oldest first. */
export async function listReplicas(db: Queryable, serviceId: string): Promise<ReplicaRecord[]> {
  return (await replicasOfServices(db, [serviceId])).get(serviceId)!;
}

/** A project's live services (not schedules of services), oldest first, as `ps` lists them. */
export async function liveServicesOf(db: Queryable, projectId: string): Promise<Array<{ id: string; name: string; desiredReplicas: number }>> {
  const rows = await db.query<{ id: string; name: string; desired_replicas: number | null }>(
    `SELECT id, name, desired_replicas FROM runs
     WHERE project_id = $1 AND ${SERVICE_PARENT} AND NOT deleted AND status NOT IN ${FINISHED} AND spec -> 'schedule' IS NULL
     ORDER BY submitted_at, id`, [projectId]);
  return rows.map((row) => ({ id: row.id, name: row.name, desiredReplicas: row.desired_replicas ?? 0 }));
}

/** As listReplicas for each of several services, by service id, in one query. */
export async function replicasOfServices(db: Queryable, serviceIds: readonly string[]): Promise<Map<string, ReplicaRecord[]>> {
  const replicas = new Map<string, ReplicaRecord[]>(serviceIds.map((id) => [id, []]));
  const rows = await db.query(`SELECT * FROM runs WHERE service_id = ANY($1::text[]) AND NOT deleted ORDER BY replica, submitted_at`, [serviceIds]);
  for (const row of rows) replicas.get(row.service_id as string)!.push(toReplica(row));
  return replicas;
}

/**
 * The replicas of each service, by service id, in one query: live ones, and for the services in `showAllOf`
 * (those that have finished) every one that has not been deleted.
 */
export async function replicaViewsOf(db: Queryable, serviceIds: readonly string[], showAllOf: readonly string[]): Promise<Map<string, Replica[]>> {
  const views = new Map<string, Replica[]>(serviceIds.map((id) => [id, []]));
  if (serviceIds.length === 0) return views;
  const rows = await db.query(
    `SELECT r.*, i.name AS instance_name FROM runs r LEFT JOIN instances i ON i.id = r.instance_id
     WHERE r.service_id = ANY($1::text[]) AND NOT r.deleted AND (r.service_id = ANY($2::text[]) OR r.status NOT IN ${FINISHED})
     ORDER BY r.replica, r.submitted_at`, [serviceIds, showAllOf]);
  for (const row of rows) {
    const replica = toReplica(row);
    views.get(replica.serviceId)!.push({
      replica: replica.replica, group: replica.group, generation: replica.generation, state: replicaState(replica), statusMessage: replica.statusMessage,
      instance: row.instance_name ?? null, startedAt: replica.startedAt?.toISOString() ?? null, readyAt: replica.readyAt?.toISOString() ?? null,
    });
  }
  return views;
}

/**
 * Adds a replica of `group` (null: a service without groups): a submitted run of the service's current spec, or
 * of the group's spec with the group's resources, which the scheduler places like a task.
 */
export async function insertReplica(db: Queryable, service: RunRecord, replica: number, group: string | null): Promise<ReplicaRecord> {
  const spec = group === null ? service.spec : groupSpec(service.spec as ServiceSpec, group);
  if (!spec) throw new Error(`service ${service.name} has no replica group ${group}`);
  const requirement = group === null ? service.requirement : normalizeResources(spec.resources, 'run', spec.max_price as number | undefined);
  const rows = await db.query(
    `INSERT INTO runs (id, project_id, user_id, name, kind, spec, files, repos, requirement, priority, generation, status, status_message, service_id, replica,
       replica_group, service_spec)
     VALUES ($1, $2, $3, $4, 'service', $5, $6, $12, $7, $8, $9, 'submitted', 'waiting to be scheduled', $10, $11, $13, $14) RETURNING *`,
    [randomUUID(), service.projectId, service.userId, service.name, spec, service.files, requirement, service.priority,
      service.generation, service.id, replica, service.repos, group, group === null ? null : service.spec]);
  return toReplica(rows[0]);
}

/** Writes each replica group's count, and their sum as the service's. */
export async function setGroupReplicas(db: Queryable, serviceId: string, groups: Record<string, GroupScale>): Promise<void> {
  const total = Object.values(groups).reduce((n, g) => n + g.desired, 0);
  await db.query('UPDATE runs SET group_replicas = $2, desired_replicas = $3, scaled_at = now() WHERE id = $1', [serviceId, groups, total]);
}

export async function setDesiredReplicas(db: Queryable, serviceId: string, count: number): Promise<void> {
  await db.query('UPDATE runs SET desired_replicas = $2, scaled_at = now() WHERE id = $1', [serviceId, count]);
}

export async function setReplicaFailures(db: Queryable, serviceId: string, failures: number): Promise<void> {
  await db.query('UPDATE runs SET replica_failures = $2 WHERE id = $1', [serviceId, failures]);
}

export async function setStableGeneration(db: Queryable, serviceId: string, generation: number): Promise<void> {
  await db.query('UPDATE runs SET stable_generation = $2 WHERE id = $1', [serviceId, generation]);
}

/**
 * Writes the stall (null clears it) with the status message that tells of it, at once, so that no reader sees one
 * without the other; unless the service moved to another generation meanwhile.
 */
export async function setRolloutStall(db: Queryable, serviceId: string, generation: number, stall: RolloutStall | null, statusMessage: string): Promise<void> {
  await db.query('UPDATE runs SET rollout_stall = $2, status_message = $4 WHERE id = $1 AND generation = $3', [serviceId, stall, generation, statusMessage]);
}

/** The controller has taken note of these replicas' end. */
export async function noteReplicasEnded(db: Queryable, replicaIds: readonly string[]): Promise<void> {
  await db.query('UPDATE runs SET replaced_at = now() WHERE id = ANY($1::text[])', [replicaIds]);
}

/** A replica stopped for not becoming ready in time: noted as ended with the reason. */
export async function noteReplicaReplaced(db: Queryable, replicaId: string, reason: string): Promise<void> {
  await db.query('UPDATE runs SET status_message = $2, replaced_at = now() WHERE id = $1', [replicaId, reason]);
}

export async function markReplicaReady(db: Queryable, replicaId: string): Promise<void> {
  await db.query(`UPDATE runs SET ready_at = now(), status_message = 'ready' WHERE id = $1 AND status = 'running'`, [replicaId]);
}

export async function markReplicaUnready(db: Queryable, replicaId: string, message: string): Promise<void> {
  await db.query('UPDATE runs SET ready_at = NULL, status_message = $2 WHERE id = $1', [replicaId, message]);
}

export async function setRunningReplicaMessage(db: Queryable, replicaId: string, message: string): Promise<void> {
  await db.query(`UPDATE runs SET status_message = $2 WHERE id = $1 AND status = 'running'`, [replicaId, message]);
}

/** Takes a replica out of rotation: with a message while requests in flight finish, without when it stops at once. */
export async function startReplicaDrain(db: Queryable, replicaId: string, message: string | null): Promise<void> {
  await db.query('UPDATE runs SET draining_since = now(), status_message = coalesce($2, status_message) WHERE id = $1', [replicaId, message]);
}

/**
 * The services the gateway publishes and their ready replicas, as one snapshot. A service a schedule submitted
 * (`<name>-<n>`) is published under the schedule's name, as dstack's scheduled service keeps its name: one run of a
 * schedule is active at a time. Once the schedule is deleted, which frees its name, the service goes by its own.
 */
export async function loadRoutingTable(db: Queryable): Promise<ServiceRoute[]> {
  const services = await db.query(
    `SELECT r.id, r.project_id, coalesce(s.name, r.name) AS name, r.spec, r.submitted_at, p.name AS project_name
     FROM runs r JOIN projects p ON p.id = r.project_id LEFT JOIN runs s ON s.id = r.schedule_id AND NOT s.deleted
     WHERE r.kind = 'service' AND r.service_id IS NULL AND NOT r.deleted AND r.status IN ('submitted', 'provisioning', 'running')`);
  if (services.length === 0) return [];
  // Every replica in rotation, found by its own index (runs_in_rotation); those of services not listed are left out below.
  const replicas = await db.query(
    `SELECT r.id, r.service_id, r.replica, (r.spec->>'port')::int AS port, i.agent_url, i.agent_token FROM runs r JOIN instances i ON i.id = r.instance_id
     WHERE r.service_id IS NOT NULL AND r.status = 'running' AND r.ready_at IS NOT NULL AND r.draining_since IS NULL
       AND i.agent_url IS NOT NULL AND i.status = 'busy'
     ORDER BY r.replica`);
  const replicasOf = new Map<string, Row[]>();
  for (const replica of replicas) {
    const listed = replicasOf.get(replica.service_id);
    if (listed) listed.push(replica);
    else replicasOf.set(replica.service_id, [replica]);
  }
  return services.map((service) => {
    const settings = serviceSettings(service.spec as ServiceSpec);
    return {
      runId: service.id, projectId: service.project_id, project: service.project_name, run: service.name,
      auth: settings.auth, stripPrefix: settings.stripPrefix, model: settings.model,
      maxBodyBytes: settings.maxBodyBytes, firstByteTimeoutMs: settings.firstByteTimeoutMs, idleTimeoutMs: settings.idleTimeoutMs,
      holdMs: settings.holdMs, gateway: settings.gateway, https: settings.https, rateLimits: settings.rateLimits,
      replicas: (replicasOf.get(service.id) ?? []).map((r) => ({ id: r.id, replica: r.replica, port: r.port, agentUrl: r.agent_url, agentToken: r.agent_token })),
      createdAt: Math.floor(new Date(service.submitted_at).getTime() / 1000),
    };
  });
}

/**
 * What a new generation of a service changes: everything but the replica counts and scaling (the service's and
 * each group's), which change in place.
 */
function template(spec: Record<string, unknown>, files: unknown, repos: unknown): string {
  const { replicas, scaling: _scaling, ...rest } = spec;
  const groups = Array.isArray(replicas) ? replicas.map(({ count: _count, scaling: _groupScaling, ...group }) => group) : null;
  return stableJson({ rest, groups, files, repos });
}

/** What a new generation changes for the replicas of one group; null when the spec has no such group. */
function groupTemplate(spec: Record<string, unknown>, group: string, files: unknown, repos: unknown): string | null {
  const own = groupSpec(spec as ServiceSpec, group);
  return own ? template(own, files, repos) : null;
}

/**
 * A new generation rolls only the groups whose spec it changes: the live replicas of every other group are
 * moved to it as they are, so that the rollout leaves them be.
 */
async function carryUnchangedGroups(db: Queryable, service: RunRecord, next: ServiceInputs, generation: number): Promise<void> {
  for (const { name, spec } of replicaGroupsOf(next.spec as ServiceSpec)) {
    if (name === null) continue;
    const before = groupTemplate(service.spec, name, service.files, service.repos);
    if (before === null || before !== groupTemplate(next.spec, name, next.files, next.repos)) continue;
    await db.query(
      `UPDATE runs SET generation = $3, spec = $4, service_spec = $5 WHERE service_id = $1 AND replica_group = $2 AND NOT deleted AND status NOT IN ${FINISHED}`,
      [service.id, name, generation, spec, next.spec]);
  }
}

function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${stableJson((value as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'null';
}

/**
 * `rolling`: a new generation, which the service controller rolls out replica by replica; `settled`: the template
 * of the generation that serves, which it goes back to without restarting a replica; `in-place`: only the replica
 * count or scaling changed.
 */
export type ServiceUpdate = 'rolling' | 'settled' | 'in-place' | 'unchanged';

type ServiceInputs = Pick<RunRecord, 'spec' | 'files' | 'repos' | 'requirement' | 'priority'>;

/** What a generation of the service ran: the inputs of its latest replica; null when it has none left. */
async function generationInputs(db: Queryable, serviceId: string, generation: number): Promise<ServiceInputs | null> {
  const rows = await db.query('SELECT * FROM runs WHERE service_id = $1 AND generation = $2 ORDER BY submitted_at DESC LIMIT 1', [serviceId, generation]);
  return rows[0] ? toRun(rows[0]) : null;
}

/** Writes the inputs as the service's generation `generation`; a change of generation ends the stall and the count of failures. */
async function writeGeneration(db: Queryable, serviceId: string, inputs: ServiceInputs, generation: number): Promise<void> {
  await db.query(
    `UPDATE runs SET spec = $2, files = $3, repos = $4, requirement = $5, priority = $6,
       replica_failures = CASE WHEN generation = $7 THEN replica_failures ELSE 0 END,
       rollout_stall = CASE WHEN generation = $7 THEN rollout_stall END,
       generation = $7, next_reconcile_at = now(), updated_at = now()
     WHERE id = $1`,
    [serviceId, inputs.spec, inputs.files, inputs.repos, inputs.requirement, inputs.priority, generation]);
}

/**
 * Re-applies a live service: a changed template is a new generation, numbered past every one it had, unless it is
 * the template of the generation that last served whole, which the service settles on again; a changed replica
 * count or scaling is written in place and restarts nothing.
 */
export async function updateService(db: Queryable, service: RunRecord, next: ServiceInputs): Promise<{ update: ServiceUpdate; generation: number }> {
  const { spec, files, repos } = next;
  const rolling = template(service.spec, service.files, service.repos) !== template(spec, files, repos);
  if (!rolling && stableJson(service.spec) === stableJson(spec)) return { update: 'unchanged', generation: service.generation };
  if (!rolling) {
    await writeGeneration(db, service.id, next, service.generation);
    return { update: 'in-place', generation: service.generation };
  }
  const [{ stable_generation: stable, newest }] = await db.query(
    'SELECT stable_generation, (SELECT max(generation) FROM runs WHERE service_id = $1) AS newest FROM runs WHERE id = $1', [service.id]);
  const serving = stable !== null && stable !== service.generation ? await generationInputs(db, service.id, stable) : null;
  const settles = serving !== null && template(serving.spec, serving.files, serving.repos) === template(spec, files, repos);
  const generation = settles ? stable as number : Math.max(service.generation, newest ?? 0) + 1;
  await writeGeneration(db, service.id, next, generation);
  await carryUnchangedGroups(db, service, next, generation);
  return { update: settles ? 'settled' : 'rolling', generation };
}

/**
 * `service rollback`: the service takes back the template of the generation that last served whole, keeping its
 * replica count and scaling; its ready replicas serve on. Says why not when there is no such generation.
 */
export async function rollBackService(db: Queryable, service: RunRecord): Promise<{ generation: number } | { refused: string }> {
  const [{ stable_generation: stable }] = await db.query('SELECT stable_generation FROM runs WHERE id = $1', [service.id]);
  if (stable === null) return { refused: `no generation of ${service.name} has been ready yet; there is nothing to roll back to` };
  if (stable === service.generation) return { refused: `${service.name} already runs generation ${stable}, the last that was ready` };
  const serving = await generationInputs(db, service.id, stable);
  if (!serving) return { refused: `generation ${stable} of ${service.name} has no replica left to take its spec from` };
  const next = { ...serving, spec: withCountsOf(serving.spec, service.spec) };
  await writeGeneration(db, service.id, next, stable);
  await carryUnchangedGroups(db, service, next, stable);
  return { generation: stable };
}

/** `spec` with the replica counts and scaling of `current`: the service's, or each group's that both have. */
function withCountsOf(spec: Record<string, unknown>, current: Record<string, unknown>): Record<string, unknown> {
  const { replicas, scaling, ...rest } = spec;
  if (Array.isArray(replicas) && Array.isArray(current.replicas)) {
    const written = current.replicas as Array<Record<string, unknown>>;
    const now = new Map(replicaGroupsOf(current as ServiceSpec).map((g, i) => [g.name, written[i]!]));
    const groups = replicaGroupsOf(spec as ServiceSpec).map((g, i) => {
      const { count: _count, scaling: _scaling, ...group } = replicas[i];
      const { count, scaling: groupScaling } = now.get(g.name) ?? replicas[i];
      return { ...group, count, ...(groupScaling === undefined ? {} : { scaling: groupScaling }) };
    });
    return { ...rest, replicas: groups };
  }
  const { replicas: count, scaling: currentScaling } = current;
  return { ...rest, ...(count === undefined ? {} : { replicas: count }), ...(currentScaling === undefined ? {} : { scaling: currentScaling }) };
}

/**
 * The replica whose logs `logs <service>` shows: replica `n` (the live one, else its latest), or without `n`
 * the lowest-numbered live replica, else the latest to have run. Null when there is none.
 */
export async function replicaForLogs(db: Queryable, serviceId: string, n: number | null): Promise<RunRecord | null> {
  const rows = await db.query(
    `SELECT * FROM runs WHERE service_id = $1 AND NOT deleted AND ($2::int IS NULL OR replica = $2)
     ORDER BY (status IN ${FINISHED}), CASE WHEN status IN ${FINISHED} THEN 0 ELSE replica END,
       submitted_at DESC LIMIT 1`, [serviceId, n]);
  return rows[0] ? toRun(rows[0]) : null;
}
