import type { Logger } from 'winston';
import type { InstanceTerminationReason } from '../api/status.js';
import { formatDollars, type Offer } from '../api/offer.js';
import { offerSatisfies, priceRefusal } from '../api/resources.js';
import { BackendAuthError, BackendError, NoCapacityError, type Backend, type BackendInstance } from '../backends/backend.js';
import { CHANNELS } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { msSinceLastEvent, recordEvent } from '../store/events.js';
import { getFleetById, isClusterFleet, recordFleetCluster, type FleetCluster, type FleetRecord } from '../store/fleets.js';
import { getInstance, idleInstanceOfEndedRun, idleSharedInstance, liveInstanceCount, markInstanceReady, stopIdleInstance, toInstance, updateInstance, type InstanceRecord } from '../store/instances.js';
import { actingSpentBudget } from '../store/budgets.js';
import { openAccrual } from '../store/ledger.js';
import { getRun } from '../store/runs.js';
import { listProjectIds } from '../store/projects.js';
import type { BackendPool } from './backend-pool.js';
import { LeasedController } from './leased.js';
import { agentOf } from './run-controller.js';

export interface InstanceTimings {
  provisioningTimeoutMs: number;
  unreachableGraceMs: number;
  healthIntervalMs: number;
  orphanSweepMs: number;
}

export const DEFAULT_INSTANCE_TIMINGS: InstanceTimings = {
  provisioningTimeoutMs: 10 * 60_000,
  unreachableGraceMs: 30_000,
  healthIntervalMs: 5000,
  orphanSweepMs: 60_000,
};

const FINISHED_RUN = ['terminated', 'failed', 'done'];
const REFUSED_RETRY_MIN_MS = 5000;
const REFUSED_RETRY_MAX_MS = 60_000;
const FIX_THE_KEY = 'fix the key in config.yml';

/** A status message that says the backend refused our credentials, rather than why the instance ends. */
function isRefusal(statusMessage: string): boolean {
  return statusMessage.endsWith(FIX_THE_KEY);
}

/** Provisions, health-checks, idles out and terminates instances at their backends. */
export class InstanceController extends LeasedController<InstanceRecord> {
  readonly name = 'instance';
  private lastSweep = 0;

  constructor(db: Db, owner: string, logger: Logger, private readonly pool: BackendPool, private readonly timings: InstanceTimings = DEFAULT_INSTANCE_TIMINGS) {
    super(db, owner, logger, { table: 'instances', channel: CHANNELS.instances, where: `status <> 'terminated'` });
  }

  protected toRecord(row: Row): InstanceRecord {
    return toInstance(row);
  }

  override async pass(nudged?: () => boolean, heard?: boolean): Promise<number | void> {
    const dueInMs = await super.pass(nudged, heard);
    if (Date.now() - this.lastSweep >= this.timings.orphanSweepMs) {
      this.lastSweep = Date.now();
      await this.sweepOrphans();
    }
    return dueInMs;
  }

  protected async reconcile(instance: InstanceRecord): Promise<number> {
    try {
      return await this.step(instance);
    } catch (error) {
      if (error instanceof BackendAuthError) return this.refused(instance, 'check its state', error);
      throw error;
    }
  }

  private async step(instance: InstanceRecord): Promise<number> {
    switch (instance.status) {
      case 'pending': return this.provision(instance, await getFleetById(this.db, instance.fleetId));
      case 'provisioning': return this.awaitBoot(instance);
      case 'idle': case 'busy': return this.watch(instance);
      case 'terminating': return this.terminate(instance);
      case 'terminated': return 60_000;
    }
  }

  private async provision(instance: InstanceRecord, fleet: FleetRecord): Promise<number> {
    if (fleet.status !== 'active' && !instance.runId) return this.end(instance, 'fleet_deleted', `fleet ${fleet.name} was deleted`);
    const stopping = instance.runId ? null : await this.budgetStopsAll(instance);
    if (stopping) return this.end(instance, 'budget_exceeded', stopping);
    if (instance.sshHost) return this.installOnHost(instance, instance.sshHost.name);
    const backend = await this.pool.backend(instance.projectId, instance.backend);
    if (!backend) return this.end(instance, 'provisioning_failed', `backend ${instance.backend} is not configured for this project`);
    const listing = await this.pool.offers(instance.projectId, [instance.backend]);
    if (listing.errors.length > 0 && listing.offers.length === 0) {
      await updateInstance(this.db, instance.id, this.owner, { status_message: listing.errors.join('; ') });
      return 5000;
    }
    const matching = listing.offers.filter((o) => offerSatisfies(o, instance.requirement));
    if (matching.length === 0) return this.end(instance, 'no_offers', priceRefusal(instance.requirement, listing.offers) ?? `no ${instance.backend} offer matches`);
    let available = matching.filter((o) => o.availability === 'available');
    let cluster: FleetCluster | null = null;
    if (isClusterFleet(fleet) && backend.createCluster) {
      const placed = await this.clusterOf(fleet, backend, available);
      if (typeof placed === 'string') return this.end(instance, 'no_capacity', placed);
      cluster = placed;
      available = available.filter((o) => o.region === placed.region && o.gpu.name === placed.gpu);
    }
    for (const offer of available) {
      try {
        const created = await backend.create({
          offer, idempotencyKey: instance.id, name: instance.name, agentToken: instance.agentToken,
          ...(instance.requirement.shmSizeMib === null ? {} : { shmSizeMib: instance.requirement.shmSizeMib }),
          ...(cluster ? { clusterId: cluster.id } : {}),
        });
        // The ledger counts the instance from here, when the backend accepted it; both written or neither.
        const acceptedAt = new Date();
        await this.db.transaction(async (tx) => {
          const written = await updateInstance(tx, instance.id, this.owner, {
            status: 'provisioning', offer, backend_instance_id: created.id, provisioning_started_at: acceptedAt,
            status_message: `${offer.gpu.count ? `${offer.gpu.count}x ${offer.gpu.name}` : 'no GPU'} in ${offer.region} at ${formatDollars(offer.pricePerHour)}/h`,
          });
          if (written) await openAccrual(tx, instance.id, offer.pricePerHour, acceptedAt);
        });
        await this.event(instance, 'Provisioning', `created at ${instance.backend} as ${created.id} (${offer.offerId}, ${formatDollars(offer.pricePerHour)}/h)`);
        return 250;
      } catch (error) {
        if (error instanceof NoCapacityError) {
          this.pool.forgetOffers(instance.projectId);
          await this.event(instance, 'NoCapacity', `${offer.offerId}: ${error.message}; trying the next offer`);
          continue;
        }
        if (error instanceof BackendAuthError) return this.end(instance, 'provisioning_failed', error.message);
        throw error;
      }
    }
    if (cluster) return this.end(instance, 'no_capacity', `no capacity in the fleet's cluster ${cluster.id} (${cluster.gpu} in ${cluster.region}, placement: cluster)`);
    return this.end(instance, 'no_capacity', `no capacity: all ${matching.length} matching ${instance.backend} offers are out of capacity`);
  }

  /**
   * The cluster a `placement: cluster` fleet's instances are created in: the one its first instance made, or a new one
   * in the first region whose offer can take the fleet's nodes (its maximum); a message when none can.
   */
  private async clusterOf(fleet: FleetRecord, backend: Backend, offers: Offer[]): Promise<FleetCluster | string> {
    if (fleet.cluster?.backend === backend.type) return fleet.cluster;
    const refusals: string[] = [];
    for (const offer of offers) {
      try {
        const made = await backend.createCluster!({ offer, idempotencyKey: fleet.id, name: fleet.name, size: fleet.nodesMax });
        const cluster = await recordFleetCluster(this.db, fleet.id, { backend: backend.type, id: made.id, region: made.region, gpu: offer.gpu.name });
        await recordEvent(this.db, { projectId: fleet.projectId, objectKind: 'fleet', objectId: fleet.id, objectName: fleet.name, reason: 'ClusterCreated', message: `cluster ${made.id} for ${fleet.nodesMax ?? 'any number of'} ${offer.gpu.name} instances in ${made.region}` });
        return cluster;
      } catch (error) {
        if (error instanceof NoCapacityError) {
          refusals.push(error.message);
          continue;
        }
        if (!(error instanceof BackendError) || error instanceof BackendAuthError) throw error;
        // Another instance of the fleet may have made the cluster meanwhile, from another offer.
        return (await getFleetById(this.db, fleet.id)).cluster ?? `placement: cluster: ${error.message}`;
      }
    }
    return `placement: cluster: no region can take the fleet's instances together now${refusals.length ? ` (${refusals.join('; ')})` : ''}`;
  }

  /**
   * An SSH fleet's host: connecting and learning the host happen now, so that SSH's own error is the host's failure
   * at once; a host that cannot be reached yet is tried again until the provisioning timeout.
   */
  private async installOnHost(instance: InstanceRecord, host: string): Promise<number> {
    const backend = (await this.pool.backendOf(instance))!;
    try {
      const placeholder = { backend: 'ssh' as const, offerId: host, gpu: { name: '', memoryMib: 0, count: 0 }, cpus: 1, memoryMib: 0, diskMib: 0, region: host, pricePerHour: 0, availability: 'available' as const };
      const created = await backend.create({ offer: placeholder, idempotencyKey: instance.id, name: instance.name, agentToken: instance.agentToken });
      const gpu = created.offer?.gpu;
      await updateInstance(this.db, instance.id, this.owner, {
        status: 'provisioning', offer: created.offer ?? null, backend_instance_id: created.id, provisioning_started_at: new Date(),
        internal_ip: created.internalIp ?? null, status_message: `installing the agent on ${host} (${gpu?.count ? `${gpu.count}x ${gpu.name}` : 'no GPU'})`,
      });
      await this.event(instance, 'Provisioning', `installing the agent on ${host} over SSH`);
      return 250;
    } catch (error) {
      if (!(error instanceof BackendError)) throw error;
      if (!error.retryable) return this.end(instance, 'provisioning_failed', error.message);
      if (Date.now() - instance.createdAt.getTime() > this.timings.provisioningTimeoutMs) return this.end(instance, 'provisioning_timeout', error.message);
      if (instance.statusMessage !== error.message) {
        await updateInstance(this.db, instance.id, this.owner, { status_message: error.message });
        await this.event(instance, 'Unreachable', `${error.message}; trying again`);
      }
      return 5000;
    }
  }

  private async awaitBoot(instance: InstanceRecord): Promise<number> {
    if (instance.provisioningStartedAt && Date.now() - instance.provisioningStartedAt.getTime() > this.timings.provisioningTimeoutMs) {
      return this.stop(instance, 'provisioning_timeout', `not ready after ${this.timings.provisioningTimeoutMs / 1000}s`);
    }
    const backend = await this.pool.backendOf(instance);
    if (!backend) return this.stop(instance, 'provisioning_failed', `backend ${instance.backend} is no longer configured`);
    const remote = await backend.get(instance.backendInstanceId!);
    if (remote.status === 'terminated' || remote.status === 'failed') {
      return this.end(instance, 'provisioning_failed', remote.reason ?? `the backend reports it ${remote.status}`);
    }
    if (remote.status !== 'running' || !remote.agentUrl) return 250;
    const health = await agentOf({ ...instance, agentUrl: remote.agentUrl }).health().catch(() => null);
    if (!health?.ok) return 250;
    const status = await markInstanceReady(this.db, instance.id, this.owner, {
      agent_url: remote.agentUrl, status_message: '', ssh_host_key: health.sshHostKey ?? null,
      ...(remote.offer ? { offer: remote.offer } : {}), ...(remote.internalIp ? { internal_ip: remote.internalIp } : {}),
    });
    if (status) {
      await this.event(instance, 'Ready', `agent healthy at ${remote.agentUrl}; ${status}`);
      await this.db.notify(CHANNELS.runs);
    }
    return this.timings.healthIntervalMs;
  }

  private async watch(instance: InstanceRecord): Promise<number> {
    const health = await agentOf(instance).health().catch(() => null);
    if (!health?.ok) {
      const since = instance.unreachableSince ?? new Date();
      if (!instance.unreachableSince) await updateInstance(this.db, instance.id, this.owner, { unreachable_since: since, status_message: 'agent not answering' });
      const remote = await this.remoteInstance(instance);
      if (remote?.interrupted) return this.end(instance, 'interrupted', remote.reason ?? 'the backend took its spot capacity back');
      if (remote?.status === 'terminated' || remote?.status === 'failed') return this.end(instance, 'terminated_by_backend', remote.reason ?? 'the backend reports the instance gone');
      // The agent may be reached another way now (the kubernetes backend's relay of a restarted server listens on another port).
      if (remote?.status === 'running' && remote.agentUrl && remote.agentUrl !== instance.agentUrl) {
        await updateInstance(this.db, instance.id, this.owner, { agent_url: remote.agentUrl });
        return 0;
      }
      if (Date.now() - since.getTime() > this.timings.unreachableGraceMs) {
        return this.stop(instance, 'unreachable', `agent unreachable for ${Math.round((Date.now() - since.getTime()) / 1000)}s`);
      }
      return Math.min(1000, this.timings.healthIntervalMs);
    }
    if (instance.unreachableSince) await updateInstance(this.db, instance.id, this.owner, { unreachable_since: null, status_message: '' });
    // An agent restarted with a new work dir makes a new host key; the run views must show the one it has now.
    if ((health.sshHostKey ?? null) !== instance.sshHostKey) await updateInstance(this.db, instance.id, this.owner, { ssh_host_key: health.sshHostKey ?? null });
    if (instance.status === 'busy' && instance.runId === null) {
      if (!(await idleSharedInstance(this.db, instance.id, this.owner))) return this.timings.healthIntervalMs;
      await this.db.notify(CHANNELS.runs);
      return 0;
    }
    if (instance.status === 'busy') {
      const run = instance.runId ? await getRun(this.db, instance.runId) : null;
      if (!run || FINISHED_RUN.includes(run.status)) {
        await idleInstanceOfEndedRun(this.db, instance.id, this.owner, instance.runId);
        await this.db.notify(CHANNELS.runs);
        return 0;
      }
      return this.timings.healthIntervalMs;
    }
    // Read at each look at an idle instance only: whether to keep it depends on its fleet as it is now.
    return this.idle(instance, await getFleetById(this.db, instance.fleetId));
  }

  private async idle(instance: InstanceRecord, fleet: FleetRecord): Promise<number> {
    if (fleet.status !== 'active') return this.stopIdle(instance, 'fleet_deleted', `fleet ${fleet.name} was deleted`);
    const stopping = await this.budgetStopsAll(instance);
    if (stopping) return this.stopIdle(instance, 'budget_exceeded', stopping);
    const live = await liveInstanceCount(this.db, fleet.id);
    // An SSH fleet's instances are its hosts, each kept while it is listed: a host being replaced is not one too many.
    if (!instance.sshHost && fleet.nodesMax !== null && live > fleet.nodesMax) return this.stopIdle(instance, 'above_max_nodes', `fleet ${fleet.name} allows at most ${fleet.nodesMax} nodes`);
    if (fleet.idleSeconds === null || live <= fleet.nodesMin) return this.timings.healthIntervalMs;
    const idleFor = Date.now() - (instance.idleSince ?? new Date()).getTime();
    const left = fleet.idleSeconds * 1000 - idleFor;
    if (left <= 0) return this.stopIdle(instance, 'idle_timeout', `idle for longer than ${fleet.idleSeconds}s`);
    return Math.min(left + 10, this.timings.healthIntervalMs);
  }

  /** Idle → terminating only while no run has taken the instance in the meantime. */
  private async stopIdle(instance: InstanceRecord, reason: InstanceTerminationReason, message: string): Promise<number> {
    if (!(await stopIdleInstance(this.db, instance.id, this.owner, reason, message))) return 0;
    await this.event(instance, 'Terminating', `${reason}: ${message}`);
    return this.terminate({ ...instance, status: 'terminating' });
  }

  private async stop(instance: InstanceRecord, reason: InstanceTerminationReason, message: string): Promise<number> {
    if (!(await updateInstance(this.db, instance.id, this.owner, { status: 'terminating', termination_reason: reason, status_message: message }))) return 0;
    await this.event(instance, 'Terminating', `${reason}: ${message}`);
    await this.db.notify(CHANNELS.runs);
    return this.terminate({ ...instance, status: 'terminating' });
  }

  private async terminate(instance: InstanceRecord): Promise<number> {
    let leftBehind = '';
    if (instance.backendInstanceId) {
      const backend = await this.pool.backendOf(instance);
      try {
        if (backend) await backend.terminate(instance.backendInstanceId);
      } catch (error) {
        if (error instanceof BackendAuthError) return this.refused(instance, 'terminate', error);
        // A host that cannot be reached cannot be cleaned: said, rather than kept terminating for ever.
        if (!(instance.sshHost && error instanceof BackendError)) throw error;
        leftBehind = `; the agent could not be uninstalled from ${instance.sshHost.name} (${error.message})`;
      }
    }
    const current = await getInstance(this.db, instance.id);
    const message = `${current && !isRefusal(current.statusMessage) ? current.statusMessage : ''}${leftBehind}`;
    return this.end(current ?? instance, current?.terminationReason ?? 'fleet_deleted', message);
  }

  /**
   * The backend refuses our credentials: said in the instance's status and in one event, and tried
   * again after as long as it has been refused so far (5 s, 10 s, 20 s … up to a minute, so that a fixed key is soon used).
   */
  private async refused(instance: InstanceRecord, action: string, error: BackendAuthError): Promise<number> {
    const message = `cannot ${action}: ${error.message}; ${FIX_THE_KEY}`;
    if (instance.statusMessage !== message) {
      if (!(await updateInstance(this.db, instance.id, this.owner, { status_message: message }))) return 0;
      await this.event(instance, 'BackendRefused', message);
      this.logger.warn(`instance ${instance.name}: ${message}`);
      return REFUSED_RETRY_MIN_MS;
    }
    const ms = await msSinceLastEvent(this.db, instance.projectId, instance.id, 'BackendRefused');
    return Math.min(REFUSED_RETRY_MAX_MS, Math.max(REFUSED_RETRY_MIN_MS, ms ?? 0));
  }

  /** The instance is gone (or never existed at the backend): record it as terminated. One with a machine at its backend terminates that first. */
  private async end(instance: InstanceRecord, reason: InstanceTerminationReason, message: string): Promise<number> {
    if (instance.backendInstanceId && instance.status !== 'terminating') return this.stop(instance, reason, message);
    const written = await updateInstance(this.db, instance.id, this.owner, {
      status: 'terminated', termination_reason: reason, status_message: message, terminated_at: new Date(),
    });
    if (instance.sshHost) await this.pool.releaseHost(instance.id);
    if (written) {
      await this.event(instance, 'Terminated', `${reason}${message ? `: ${message}` : ''}`);
      await this.db.notify(CHANNELS.runs);
      await this.db.notify(CHANNELS.fleets);
      await this.db.notify(CHANNELS.instances);
    }
    return 60_000;
  }

  private async remoteInstance(instance: InstanceRecord): Promise<BackendInstance | null> {
    if (!instance.backendInstanceId) return null;
    const backend = await this.pool.backendOf(instance);
    return backend ? await backend.get(instance.backendInstanceId).catch(() => null) : null;
  }

  /** Backend instances whose record is already terminated (a crash between the two) are terminated again. */
  private async sweepOrphans(): Promise<void> {
    for (const projectId of await listProjectIds(this.db)) {
      const backends = await this.pool.forProject(projectId).catch(() => new Map<string, Backend>());
      for (const [type, backend] of backends) {
        const remote = await backend.list().catch(() => []);
        for (const r of remote) {
          if (r.status === 'terminated') continue;
          const record = await getInstance(this.db, r.idempotencyKey);
          if (record?.status === 'terminated') {
            this.logger.warn(`terminating orphaned ${type} instance ${r.id} of ${record.name}`);
            await backend.terminate(r.id).catch((e) => this.logger.warn(`could not terminate ${r.id}: ${e.message}`));
          }
        }
      }
    }
  }

  /** The reason the instance ends when its project's budget is spent with on_exceed stop_all; null otherwise. */
  private async budgetStopsAll(instance: InstanceRecord): Promise<string | null> {
    const spent = await actingSpentBudget(this.db, instance.projectId);
    return spent?.budget.on_exceed === 'stop_all' ? spent.reason : null;
  }

  private event(instance: InstanceRecord, reason: string, message: string): Promise<void> {
    return recordEvent(this.db, { projectId: instance.projectId, objectKind: 'instance', objectId: instance.id, objectName: instance.name, reason, message });
  }
}
