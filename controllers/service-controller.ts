import type { Logger } from 'winston';
import { serviceSettings, type GroupSettings, type ServiceSettings } from '../api/service-settings.js';
import type { RolloutStall } from '../api/services.js';
import type { ServiceSpec } from '../api/spec.js';
import { FINISHED_RUN_STATUSES, stopReason, type RunStatus, type RunTerminationReason } from '../api/status.js';
import { AgentClient } from '../agent/client.js';
import { CHANNELS } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { recordEvent } from '../store/events.js';
import { getInstance, instancesByIds } from '../store/instances.js';
import { requestRunStop, updateRun } from '../store/runs.js';
import { pruneServiceStats, serviceWindows, type ServiceWindow } from '../store/service-stats.js';
import {
  insertReplica, listReplicas, markReplicaReady, markReplicaUnready, noteReplicaReplaced, noteReplicasEnded, replicaState, SERVICE_PARENT,
  setDesiredReplicas, setGroupReplicas, setReplicaFailures, setRolloutStall, setRunningReplicaMessage, setStableGeneration, startReplicaDrain, toService,
  replicasOfServices, type GroupScale, type ReplicaRecord, type ServiceRecord,
} from '../store/services.js';
import { batchedReads } from './batched-calls.js';
import { desiredReplicas } from './autoscaler.js';
import { LeasedController } from './leased.js';
import { probeReplica } from './service-probes.js';
import type { SecretBox } from '../store/secrets.js';

/** How often a service is looked at when nothing else is due: autoscaling and draining move at this pace. */
const LOOK_MS = 1000;
/** A replica taken out of rotation still gets requests from gateways that have not refreshed their table yet. */
const ROUTING_REFRESH_GRACE_MS = 1500;
/**
 * Replicas of a generation failing in a row before becoming ready, after which a service that never served fails,
 * and a rollout stalls: no more replicas of that generation start while the older ones serve.
 */
const MAX_FAILURES_BEFORE_READY = 3;
const MAX_REPLACE_BACKOFF_MS = 60_000;
/** Placement failures that another replica would meet as well. */
const UNPLACEABLE: readonly string[] = ['no_fleet_matches', 'no_offers'];
/** How long a service that serves waits before it tries again to place a replica that could not be placed. */
const PLACEMENT_RETRY_MS = 30_000;
const PRUNE_EVERY_MS = 60_000;

interface ProbeMemory {
  nextAt: number;
  successes: number;
}

/**
 * Owns each service run: how many replicas it aims for (replicas, scaling, the autoscaler), which replicas
 * exist (added as submitted runs the scheduler places like tasks), which are ready (probes through the agent),
 * rolling replacement when the spec's generation changes, draining before any replica stops, and stop.
 */
export class ServiceController extends LeasedController<ServiceRecord> {
  readonly name = 'service';
  /** Probe streaks per replica and probe; in memory because a restarted server simply probes again. */
  private readonly probes = new Map<string, ProbeMemory[]>();
  /** When a replica that had been ready left rotation; it gets startup_timeout from then to come back. */
  private readonly outOfRotationSince = new Map<string, number>();
  /** A replica this controller never saw start is given its startup time from here, not from its start. */
  private readonly knownFrom = Date.now();
  private lastPrune = 0;
  /**
   * The services looked at together read their replicas in one statement, and the replicas probed together their
   * instances: at 500 services, a statement each was about 6% of the embedded database's time (bench/README.md).
   */
  private readonly replicaReads = batchedReads((serviceIds) => replicasOfServices(this.db, serviceIds));
  private readonly instanceReads = batchedReads((ids) => instancesByIds(this.db, ids));

  constructor(db: Db, owner: string, logger: Logger, private readonly secrets: SecretBox) {
    super(db, owner, logger, {
      table: 'runs', channel: CHANNELS.runs, leaseMs: 30_000,
      // A schedule of a service is pending between its runs: the schedule controller's, not a service to run.
      where: `${SERVICE_PARENT} AND status NOT IN ('pending', 'terminated', 'failed', 'done')`, hears: { statuses: [], family: true },
    });
  }

  protected toRecord(row: Row): ServiceRecord {
    return toService(row);
  }

  protected async reconcile(service: ServiceRecord): Promise<number> {
    await this.pruneNow();
    const settings = serviceSettings(service.spec as ServiceSpec);
    const replicas = (await this.replicaReads.call(service.id))!;
    const live = replicas.filter((r) => !isFinished(r.status));
    if (service.desired !== 'run') return this.stopping(service, live, settings);
    if (service.status === 'submitted') {
      if (!(await updateRun(this.db, service.id, this.owner, { status: 'provisioning', status_message: 'starting replicas' }))) return LOOK_MS;
      service.status = 'provisioning';
      if (!hasGroups(settings)) {
        const initial = settings.replicas.min;
        await setDesiredReplicas(this.db, service.id, initial);
        service.desiredReplicas = initial;
        service.scaledAt = new Date();
      }
    }
    if (await this.noteEndedReplicas(service, replicas)) return LOOK_MS;
    await this.noteQueued(service, live);
    await this.autoscale(service, settings);
    let wait = await this.probe(service, live);
    await this.drain(service, live, settings);
    for (const group of settings.groups) wait = Math.min(wait, await this.reshape(service, group.name, live, replicas));
    await this.retireRemovedGroups(service, live, settings);
    await this.noteRollout(service, live);
    await this.updateStatus(service, live);
    return Math.min(wait, LOOK_MS);
  }

  /**
   * Counts replicas that ended on their own since the last look. A service that never served fails when trying
   * again is pointless; one that serves stalls the generation that does not come up instead (true: it failed).
   */
  private async noteEndedReplicas(service: ServiceRecord, replicas: ReplicaRecord[]): Promise<boolean> {
    const ended = replicas.filter((r) => isFinished(r.status) && !r.replacedAt);
    if (ended.length === 0) return false;
    await noteReplicasEnded(this.db, ended.map((r) => r.id));
    const failed = ended.filter((r) => r.status === 'failed' && !r.drainingSince && r.desired === 'run');
    for (const replica of failed) {
      this.probes.delete(replica.id);
      await this.event(service, 'ReplicaFailed', `replica ${replica.replica} ${replica.terminationReason?.replaceAll('_', ' ') ?? 'failed'}: ${replica.statusMessage}`);
    }
    const unplaceable = failed.find((r) => UNPLACEABLE.includes(r.terminationReason ?? '') && r.generation === service.generation);
    if (unplaceable) {
      const why = `replica ${unplaceable.replica} cannot be placed: ${unplaceable.statusMessage}`;
      if (service.stableGeneration === null) {
        await this.finish(service, 'failed', unplaceable.terminationReason as RunTerminationReason, why);
        return true;
      }
      await this.stall(service, 'unplaceable', why);
    }
    const crashed = failed.filter((r) => !UNPLACEABLE.includes(r.terminationReason ?? '') && r.generation === service.generation);
    if (crashed.length === 0) return false;
    return this.countFailures(service, crashed.length, 'ended before becoming ready', crashed[crashed.length - 1]!, crashed[crashed.length - 1]!.statusMessage);
  }

  /** Adds failures of the current generation to its count in a row; at the limit, fails a service that never served (true) or stalls. */
  private async countFailures(service: ServiceRecord, count: number, what: string, last: ReplicaRecord, why: string): Promise<boolean> {
    service.replicaFailures += count;
    await setReplicaFailures(this.db, service.id, service.replicaFailures);
    if (service.replicaFailures < MAX_FAILURES_BEFORE_READY) return false;
    const inARow = `${service.replicaFailures} replicas in a row ${what}`;
    if (service.stableGeneration === null) {
      await this.finish(service, 'failed', 'failed_by_user_code', `${inARow}; the last, replica ${last.replica}: ${why}`);
      return true;
    }
    await this.stall(service, 'failing', `${inARow}; the last: ${why}`);
    return false;
  }

  /**
   * A replica of the current generation still queued for a place (a fleet at its maximum, offers sold out) after
   * its startup_timeout stalls the rollout of a service that serves, as one that cannot be placed; it stays queued.
   */
  private async noteQueued(service: ServiceRecord, live: ReplicaRecord[]): Promise<void> {
    if (service.stableGeneration === null || service.stall) return;
    const queued = live.find((r) => r.generation === service.generation && r.status === 'submitted' && !r.drainingSince
      && Date.now() - r.submittedAt.getTime() > serviceSettings(r.spec as ServiceSpec).startupTimeoutMs);
    if (!queued) return;
    const seconds = serviceSettings(queued.spec as ServiceSpec).startupTimeoutMs / 1000;
    await this.stall(service, 'unplaceable', `replica ${queued.replica} not placed within ${seconds}s: ${queued.statusMessage}`, 'it stays in the queue');
  }

  /** Marks the current generation stalled, once per cause, with an event that says what still serves. */
  private async stall(service: ServiceRecord, reason: RolloutStall['reason'], why: string, then?: string): Promise<void> {
    const { generation } = service;
    const proven = generation === service.stableGeneration;
    const head = proven ? `replicas of generation ${generation} ${reason === 'failing' ? 'keep failing' : 'wait'}`
      : `rollout of generation ${generation} ${reason === 'failing' ? 'failed' : 'waits'}`;
    const retry = then ?? (reason === 'unplaceable' ? `trying again every ${PLACEMENT_RETRY_MS / 1000}s` : proven ? 'trying again' : null);
    const stall: RolloutStall = { generation, reason, message: `${head}: ${why}${retry ? `; ${retry}` : ''}` };
    if (service.stall?.message === stall.message) return;
    const live = (await listReplicas(this.db, service.id)).filter((r) => !isFinished(r.status));
    const message = stalledMessage(stall, live);
    await setRolloutStall(this.db, service.id, generation, stall, message);
    service.stall = stall;
    service.statusMessage = message;
    await this.event(service, reason === 'failing' ? 'RolloutFailed' : 'RolloutWaiting', message);
  }

  private async clearStall(service: ServiceRecord, why: string): Promise<void> {
    if (!service.stall) return;
    await setRolloutStall(this.db, service.id, service.generation, null, service.statusMessage);
    service.stall = null;
    await this.event(service, 'RolloutResumed', why);
  }

  /** Moves each group's count (the service's, without groups) on its own, within its range, on the service's requests. */
  private async autoscale(service: ServiceRecord, settings: ServiceSettings): Promise<void> {
    if (!hasGroups(settings)) {
      const group = settings.groups[0]!;
      const current = service.desiredReplicas ?? group.replicas.min;
      const next = await this.scaled(service, group, current, service.scaledAt ?? service.submittedAt);
      if (next === current && service.desiredReplicas !== null) return;
      await setDesiredReplicas(this.db, service.id, next);
      service.desiredReplicas = next;
      service.scaledAt = new Date();
      return;
    }
    const groups: Record<string, GroupScale> = {};
    let changed = Object.keys(service.groupReplicas).length !== settings.groups.length;
    for (const group of settings.groups) {
      const was = service.groupReplicas[group.name!];
      const current = was?.desired ?? group.replicas.min;
      const next = await this.scaled(service, group, current, was ? new Date(was.scaledAt) : service.scaledAt ?? service.submittedAt);
      groups[group.name!] = was && next === current ? was : { desired: next, scaledAt: new Date().toISOString() };
      if (!was || next !== current) changed = true;
    }
    if (!changed) return;
    await setGroupReplicas(this.db, service.id, groups);
    service.groupReplicas = groups;
    service.desiredReplicas = Object.values(groups).reduce((n, g) => n + g.desired, 0);
  }

  /** The count a group (or the service) should aim for now; a change is told as a Scaled event. */
  private async scaled(service: ServiceRecord, group: GroupSettings, current: number, scaledAt: Date): Promise<number> {
    const { scaling } = group;
    const window: ServiceWindow | null = scaling ? (await serviceWindows(this.db, [service.id], scaling.windowSeconds)).get(service.id) ?? null : null;
    const next = desiredReplicas({ settings: group, current, scaledAt, window, now: Date.now() });
    if (next !== current) {
      const whose = group.name === null ? '' : `group ${group.name}: `;
      await this.event(service, 'Scaled', `${whose}${current} → ${next} replica${next === 1 ? '' : 's'}${scaling ? ` (${scaling.metric}, target ${scaling.target} per replica)` : ''}`);
    }
    return next;
  }

  /** The count a group (null: the service without groups) aims for now. */
  private targetOf(service: ServiceRecord, group: string | null): number {
    return (group === null ? service.desiredReplicas : service.groupReplicas[group]?.desired) ?? 0;
  }

  /**
   * Replicas of a group the spec no longer has: an unready one stops at once, a ready one drains once every group
   * of the current generation is ready, so that capacity never drops while the new groups come up.
   */
  private async retireRemovedGroups(service: ServiceRecord, live: ReplicaRecord[], settings: ServiceSettings): Promise<void> {
    const names = new Set(settings.groups.map((g) => g.name));
    const serving = live.filter((r) => !r.drainingSince && r.desired === 'run');
    const removed = serving.filter((r) => !names.has(r.group));
    if (removed.length === 0) return;
    const readyNow = serving.filter((r) => names.has(r.group) && r.readyAt && r.generation === service.generation).length;
    const replaced = readyNow >= (service.desiredReplicas ?? 0);
    for (const replica of removed.filter((r) => !r.readyAt || replaced)) await this.startDraining(service, replica, 'its replica group was removed');
  }

  /**
   * Probes the running replicas that are due, each with the probes, port and startup timeout of its own
   * generation's spec; returns how soon the next probe falls due.
   */
  private async probe(service: ServiceRecord, live: ReplicaRecord[]): Promise<number> {
    const now = Date.now();
    let next = Number.POSITIVE_INFINITY;
    const running = live.filter((r) => r.status === 'running' && !r.drainingSince && r.instanceId && r.jobId);
    await Promise.all(running.map(async (replica) => {
      const settings = serviceSettings(replica.spec as ServiceSpec);
      const memory = this.probes.get(replica.id) ?? settings.probes.map(() => ({ nextAt: 0, successes: 0 }));
      this.probes.set(replica.id, memory);
      const due = settings.probes.map((probe, i) => ({ probe, memory: memory[i]! })).filter(({ memory: m }) => m.nextAt <= now);
      if (due.length > 0) {
        const instance = await this.instanceReads.call(replica.instanceId!);
        if (!instance?.agentUrl) return;
        const results = await Promise.all(due.map(async ({ probe, memory: m }) => {
          const result = await probeReplica(instance, replica.jobId!, settings.port, probe, { db: this.db, box: this.secrets, projectId: service.projectId });
          m.nextAt = Date.now() + probe.intervalMs;
          m.successes = result.ok ? m.successes + 1 : 0;
          return result;
        }));
        const failure = results.find((r) => !r.ok);
        const passing = settings.probes.every((probe, i) => memory[i]!.successes >= probe.readyAfter);
        await this.readiness(service, replica, settings, passing, failure && !failure.ok ? failure.reason : null);
      }
      for (const m of memory) next = Math.min(next, m.nextAt - Date.now());
    }));
    return Math.max(0, next);
  }

  private async readiness(service: ServiceRecord, replica: ReplicaRecord, settings: ServiceSettings, passing: boolean, failure: string | null): Promise<void> {
    if (passing && !replica.readyAt) {
      await markReplicaReady(this.db, replica.id);
      replica.readyAt = new Date();
      this.outOfRotationSince.delete(replica.id);
      await this.event(service, 'ReplicaReady', `replica ${replica.replica} is ready on its port ${settings.port}`);
      if (replica.generation === service.generation) {
        await setReplicaFailures(this.db, service.id, 0);
        service.replicaFailures = 0;
        if (service.stall) await this.clearStall(service, `replica ${replica.replica} of generation ${replica.generation} is ready`);
      }
      if (service.stableGeneration === null) {
        await setStableGeneration(this.db, service.id, replica.generation);
        service.stableGeneration = replica.generation;
      }
      await this.db.notify(CHANNELS.serviceRoutes);
    } else if (!passing && replica.readyAt && failure) {
      await markReplicaUnready(this.db, replica.id, `out of rotation: ${failure}`);
      replica.readyAt = null;
      this.outOfRotationSince.set(replica.id, Date.now());
      await this.event(service, 'ReplicaUnready', `replica ${replica.replica} is out of rotation: ${failure}`);
      await this.db.notify(CHANNELS.serviceRoutes);
    } else if (!replica.readyAt && failure) {
      const since = this.outOfRotationSince.get(replica.id) ?? Math.max(replica.startedAt?.getTime() ?? Date.now(), this.knownFrom);
      if (Date.now() - since > settings.startupTimeoutMs) {
        const seconds = settings.startupTimeoutMs / 1000;
        const why = this.outOfRotationSince.has(replica.id) ? `not back in rotation within ${seconds}s` : `not ready within ${seconds}s of starting`;
        await this.replaceNotReady(service, replica, `${why}: ${failure}`);
      } else if (replica.statusMessage !== `starting: ${failure}`) {
        await setRunningReplicaMessage(this.db, replica.id, `starting: ${failure}`);
      }
    }
  }

  /** A replica that never became ready in time is stopped and counts as a failure, like one that crashed. */
  private async replaceNotReady(service: ServiceRecord, replica: ReplicaRecord, reason: string): Promise<void> {
    await noteReplicaReplaced(this.db, replica.id, reason);
    await requestRunStop(this.db, replica.id, false);
    this.probes.delete(replica.id);
    this.outOfRotationSince.delete(replica.id);
    await this.event(service, 'ReplicaFailed', `replica ${replica.replica} ${reason}`);
    if (replica.generation === service.generation) await this.countFailures(service, 1, 'did not become ready', replica, reason);
    await this.db.notify(CHANNELS.runs);
  }

  /** Stops draining replicas once nothing is in flight through their agent, or the drain timeout passed. */
  private async drain(service: ServiceRecord, live: ReplicaRecord[], settings: ServiceSettings): Promise<void> {
    for (const replica of live.filter((r) => r.drainingSince && r.desired === 'run')) {
      const drainingFor = Date.now() - replica.drainingSince!.getTime();
      if (replica.status === 'running' && drainingFor < settings.drainTimeoutMs) {
        if (drainingFor < ROUTING_REFRESH_GRACE_MS) continue;
        if (await this.exchangesInFlight(replica) > 0) continue;
      }
      await requestRunStop(this.db, replica.id, false);
      this.probes.delete(replica.id);
      await this.db.notify(CHANNELS.runs);
    }
  }

  private async exchangesInFlight(replica: ReplicaRecord): Promise<number> {
    const instance = replica.instanceId ? await getInstance(this.db, replica.instanceId) : null;
    if (!instance?.agentUrl || !replica.jobId) return 0;
    const job = await new AgentClient(instance.agentUrl, instance.agentToken, { timeoutMs: 2000 }).job(replica.jobId).catch(() => null);
    return job?.forwarding ?? 0;
  }

  /**
   * Moves the replica set one step toward the desired count of the current generation: adds replicas, and
   * drains extra or outdated ones. An update replaces one replica at a time and only once a new one is ready,
   * so serving capacity never drops below the desired count.
   */
  private async reshape(service: ServiceRecord, group: string | null, live: ReplicaRecord[], replicas: ReplicaRecord[]): Promise<number> {
    const target = this.targetOf(service, group);
    const lastEndedAt = lastEnd(replicas);
    const given = givenUp(service);
    const mine = live.filter((r) => r.group === group);
    const serving = mine.filter((r) => !r.drainingSince && r.desired === 'run');
    const current = serving.filter((r) => r.generation === service.generation);
    const outdated = serving.filter((r) => r.generation !== service.generation);
    const ready = (rs: ReplicaRecord[]) => rs.filter((r) => r.readyAt).length;
    if (outdated.length === 0) {
      if (current.length > target) {
        const extra = [...current].sort((a, b) => Number(!!a.readyAt) - Number(!!b.readyAt) || b.replica - a.replica).slice(0, current.length - target);
        for (const replica of extra) await this.startDraining(service, replica, 'scaled down');
        return LOOK_MS;
      }
      if (given) return this.keepServing(service, group, live, serving, replicas, lastEndedAt);
      return current.length < target ? this.add(service, group, live, target - current.length, lastEndedAt) : LOOK_MS;
    }
    // While the new generation is given up, an old replica briefly out of rotation is the capacity that is left.
    for (const replica of outdated.filter((r) => (!r.readyAt && !given) || target === 0)) await this.startDraining(service, replica, 'replaced by the new generation');
    const outdatedReady = outdated.filter((r) => r.readyAt && target > 0);
    // An update that also lowers the count first drains the old replicas beyond it, as a scale-down would; the surge needs the room.
    for (const replica of outdatedReady.splice(target)) await this.startDraining(service, replica, 'scaled down');
    const anyOutdatedDraining = mine.some((r) => r.drainingSince && r.generation !== service.generation && !isFinished(r.status));
    if (outdatedReady.length > 0 && !anyOutdatedDraining && ready(current) > 0 && ready(current) + outdatedReady.length > target) {
      await this.startDraining(service, outdatedReady[0]!, `replaced by generation ${service.generation}`);
    }
    if (given) return this.keepServing(service, group, live, serving, replicas, lastEndedAt);
    const surging = current.length + outdatedReady.length;
    if (current.length < target && surging < target + 1) return this.add(service, group, live, 1, lastEndedAt);
    return LOOK_MS;
  }

  /**
   * While the current generation is given up, the older replicas are all that serves: one that ends is replaced
   * by a replica of the generation that last served whole, with that generation's spec.
   */
  private async keepServing(service: ServiceRecord, group: string | null, live: ReplicaRecord[], serving: ReplicaRecord[], replicas: ReplicaRecord[], lastEndedAt: number): Promise<number> {
    // A ready replica of the current generation is one of a group the update left as it was (or carried back).
    const missing = this.targetOf(service, group) - serving.filter((r) => r.generation !== service.generation || r.readyAt).length;
    const stable = replicas.filter((r) => r.generation === service.stableGeneration && r.group === group).at(-1);
    if (missing <= 0 || !stable) return LOOK_MS;
    const { serviceSpec: spec, files, repos, requirement, priority, generation } = stable;
    return this.add({ ...service, spec, files, repos, requirement, priority, generation }, group, live, missing, lastEndedAt);
  }

  /**
   * Adds replicas (to `live` as well), after a pause since `lastEndedAt` that doubles with each failure in a row,
   * or a fixed one while no replica of the generation could be placed.
   */
  private async add(service: ServiceRecord, group: string | null, live: ReplicaRecord[], count: number, lastEndedAt: number): Promise<number> {
    const backoff = service.stall?.reason === 'unplaceable' ? PLACEMENT_RETRY_MS
      : service.replicaFailures > 0 ? Math.min(MAX_REPLACE_BACKOFF_MS, 1000 * 2 ** (service.replicaFailures - 1)) : 0;
    const wait = lastEndedAt + backoff - Date.now();
    if (wait > 0) return wait;
    const used = new Set(live.map((r) => r.replica));
    for (let added = 0, n = 0; added < count; n++) {
      if (used.has(n)) continue;
      used.add(n);
      const replica = await insertReplica(this.db, service, n, group);
      live.push(replica);
      added += 1;
      await this.event(service, 'ReplicaAdded', `replica ${replica.replica} (${group === null ? '' : `group ${group}, `}generation ${replica.generation}) submitted`);
    }
    await this.db.notify(CHANNELS.runs);
    return LOOK_MS;
  }

  private async startDraining(service: ServiceRecord, replica: ReplicaRecord, why: string): Promise<void> {
    if (replica.status === 'submitted' || replica.status === 'provisioning' || !replica.readyAt) {
      await startReplicaDrain(this.db, replica.id, null);
      await requestRunStop(this.db, replica.id, false);
      await this.event(service, 'ReplicaStopping', `replica ${replica.replica}: ${why}`);
    } else {
      await startReplicaDrain(this.db, replica.id, `draining: ${why}`);
      await this.event(service, 'ReplicaDraining', `replica ${replica.replica}: ${why}; requests in flight finish first`);
    }
    replica.drainingSince = new Date();
    await this.db.notify(CHANNELS.serviceRoutes);
    await this.db.notify(CHANNELS.runs);
  }

  /** `orchestrator stop`: every replica drains and stops, then the service ends; abort skips the draining. */
  private async stopping(service: ServiceRecord, live: ReplicaRecord[], settings: ServiceSettings): Promise<number> {
    const abort = service.desired === 'abort';
    for (const replica of live.filter((r) => !r.drainingSince)) {
      if (abort) {
        await startReplicaDrain(this.db, replica.id, null);
        await requestRunStop(this.db, replica.id, true);
        replica.drainingSince = new Date();
      } else {
        await this.startDraining(service, replica, 'the service is stopping');
      }
    }
    if (!abort) await this.drain(service, live, settings);
    if (service.status !== 'terminating') await this.transition(service, 'terminating', abort ? 'aborting' : 'draining and stopping replicas');
    if (live.length === 0) {
      await this.finish(service, 'terminated', stopReason(service), 'every replica stopped');
    }
    await this.db.notify(CHANNELS.runs);
    return 250;
  }

  /**
   * Once the wanted replicas are all of the current generation and ready, it is the generation that a rollback
   * puts back, and a stall of adding replicas to it is over.
   */
  private async noteRollout(service: ServiceRecord, live: ReplicaRecord[]): Promise<void> {
    const target = service.desiredReplicas ?? 0;
    const serving = live.filter((r) => !r.drainingSince && r.desired === 'run');
    const ready = serving.filter((r) => r.readyAt && r.generation === service.generation).length;
    if (target === 0 || ready < target || serving.some((r) => r.generation !== service.generation)) return;
    if (service.stableGeneration !== service.generation) {
      await setStableGeneration(this.db, service.id, service.generation);
      service.stableGeneration = service.generation;
    }
    await this.clearStall(service, `${ready} of ${target} replicas of generation ${service.generation} ready`);
  }

  /**
   * The service is running while a replica is ready (or it is scaled to zero and wakes on a request); while a
   * generation is stalled, its message says so and what still serves.
   */
  private async updateStatus(service: ServiceRecord, replicas: ReplicaRecord[]): Promise<void> {
    if (service.status !== 'provisioning' && service.status !== 'running') return;
    const live = replicas.filter((r) => !isFinished(r.status));
    const ready = live.filter((r) => replicaState(r) === 'ready').length;
    const target = service.desiredReplicas ?? 0;
    const status: RunStatus = ready > 0 || (target === 0 && live.length === 0) ? 'running' : 'provisioning';
    const message = service.stall ? stalledMessage(service.stall, live)
      : target === 0 && live.length === 0 ? 'scaled to zero; a request starts a replica'
        : `${ready}/${target} replica${target === 1 ? '' : 's'} ready`;
    if (status === service.status && message === service.statusMessage) return;
    if (status !== service.status) {
      await this.transition(service, status, message, status === 'running' && !service.startedAt ? { started_at: new Date() } : {});
    } else {
      await updateRun(this.db, service.id, this.owner, { status_message: message });
    }
  }

  private async transition(service: ServiceRecord, status: RunStatus, message: string, extra: Record<string, unknown> = {}): Promise<void> {
    if (!(await updateRun(this.db, service.id, this.owner, { status, status_message: message, ...extra }))) return;
    service.status = status;
    service.statusMessage = message;
    await this.event(service, status.charAt(0).toUpperCase() + status.slice(1), message);
    await this.db.notify(CHANNELS.serviceRoutes);
  }

  private async finish(service: ServiceRecord, status: RunStatus, reason: RunTerminationReason, message: string): Promise<void> {
    const written = await updateRun(this.db, service.id, this.owner, { status, termination_reason: reason, status_message: message, finished_at: new Date() });
    if (!written) return;
    service.status = status;
    for (const replica of await listReplicas(this.db, service.id)) {
      this.probes.delete(replica.id);
      if (!isFinished(replica.status)) await requestRunStop(this.db, replica.id, false);
    }
    await this.event(service, status === 'failed' ? 'Failed' : 'Terminated', `${reason}: ${message}`);
    await this.db.notify(CHANNELS.serviceRoutes);
    await this.db.notify(CHANNELS.runs);
  }

  private async event(service: ServiceRecord, reason: string, message: string): Promise<void> {
    await recordEvent(this.db, { projectId: service.projectId, objectKind: 'run', objectId: service.id, objectName: service.name, reason, message });
  }

  private async pruneNow(): Promise<void> {
    if (Date.now() - this.lastPrune < PRUNE_EVERY_MS) return;
    this.lastPrune = Date.now();
    await pruneServiceStats(this.db);
  }
}

function hasGroups(settings: ServiceSettings): boolean {
  return settings.groups[0]!.name !== null;
}

/** A generation that never served whole and whose replicas kept failing gets no more until the spec changes. */
function givenUp(service: ServiceRecord): boolean {
  return service.stall?.reason === 'failing' && service.stall.generation === service.generation && service.generation !== service.stableGeneration;
}

/** The stall, and which generations' ready replicas still serve: `...; generation 1 still serves 2 replicas`. */
function stalledMessage(stall: RolloutStall, live: ReplicaRecord[]): string {
  const serving = new Map<number, number>();
  for (const replica of live) if (replicaState(replica) === 'ready') serving.set(replica.generation, (serving.get(replica.generation) ?? 0) + 1);
  const tail = [...serving].sort(([a], [b]) => a - b).map(([generation, n]) => `generation ${generation} still serves ${n} replica${n === 1 ? '' : 's'}`);
  return `${stall.message}; ${tail.length > 0 ? tail.join(', ') : 'no replica serves'}`;
}

/** When the latest replica to end ended (0 when none has). */
function lastEnd(replicas: ReplicaRecord[]): number {
  return Math.max(0, ...replicas.map((r) => r.finishedAt?.getTime() ?? 0));
}

function isFinished(status: RunStatus): boolean {
  return FINISHED_RUN_STATUSES.includes(status);
}
