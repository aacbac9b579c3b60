import { randomUUID } from 'node:crypto';
import { formatGpu } from '../api/gpu.js';
import type { Offer } from '../api/offer.js';
import type { InstanceStatus } from '../api/status.js';
import { blockCount, blockShare, isSplit } from '../api/blocks.js';
import { describeRequirement, intersectRequirements, offerSatisfies, priceRefusal, unofferedModels, type ResourceRequirement } from '../api/resources.js';
import { CHANNELS, concerns, runChange, type ChangedRun } from '../store/channels.js';
import type { Db, Queryable, Row } from '../store/db.js';
import { recordEvent, runEvent } from '../store/events.js';
import { listActiveFleets, type FleetRecord } from '../store/fleets.js';
import { giveInstanceTo, insertInstance, lockFreeInstances, takeBlocksOf, type InstanceRecord } from '../store/instances.js';
import { insertNode } from '../store/nodes.js';
import { finishUnplaced, markNodesPlaced, markPlaced, projectsQueued, setQueuedRunMessage, trySchedulerLock, writeQueueReasons, type QueueReason, type RunPlace } from '../store/run-queue.js';
import { blocksHeld, type BlocksHeld } from '../store/runs.js';
import type { BackendPool, OfferListing } from './backend-pool.js';
import { BudgetGate, type NewInstance } from './budget-gate.js';
import { LiveInstances } from './live-instances.js';
import { isDraining, sshFleetShortfall } from './ssh-placement.js';
import type { Controller } from './manager.js';
import { chooseFleets, describeSelectors, targetedInstances, type RunPlaces } from './placement-filter.js';
import { QueuedRuns, type QueuedRun } from './queued-runs.js';
import { retryDecision } from './retry-policy.js';

type NodeChoice =
  | { kind: 'instance'; fleet: FleetRecord; instance: InstanceRecord; ready: boolean }
  | { kind: 'provision'; fleet: FleetRecord; backend: string; requirement: ResourceRequirement };

type SinglePlacement =
  | NodeChoice
  /** Free blocks of an instance that runs share: the fewest that give the run what it needs. */
  | { kind: 'blocks'; fleet: FleetRecord; instance: InstanceRecord; blocks: number[] }
  | { kind: 'fail'; reason: 'no_fleet_matches' | 'no_offers'; message: string }
  /** `noFleet`: no fleet is there for the run at all, rather than none with room for it now. */
  | { kind: 'wait'; message: string; noFleet?: true };

type Placement = SinglePlacement | { kind: 'nodes'; fleet: FleetRecord; nodes: NodeChoice[] };

/** The instances a placement would create, which a project's budget may hold back. */
export function newInstances(placement: Placement): NewInstance[] {
  const choices = placement.kind === 'nodes' ? placement.nodes : [placement];
  return choices.flatMap((choice) => (choice.kind === 'provision' ? [{ fleetId: choice.fleet.id, requirement: choice.requirement }] : []));
}

/** A run this pass placed on an instance that is up: its row as the placing write left it, with its instance and fleet as placed. */
export interface PlacedRun {
  row: Row;
  instance: InstanceRecord;
  fleet: FleetRecord;
}

/**
 * This server's start loop (run-controller.ts): a run placed on an instance that is up is leased to it in the placing
 * write and handed over after the commit, with the instance and fleet the pass read under its lock, so it starts
 * without waiting for a NOTIFY's trip and a claim, and without reading them again.
 */
export interface PlacedRunStarter {
  readonly owner: string;
  readonly leaseMs: number;
  startPlaced(placed: PlacedRun[]): void;
}

/**
 * The queue: one pass takes the submitted runs in order (priority, then first come first served)
 * and gives each an idle instance, an instance still starting, or a new one within its fleet's
 * `nodes.max`; the rest wait with a reason. One scheduler at a time across servers (advisory lock).
 */
export class Scheduler implements Controller {
  readonly name = 'scheduler';
  readonly channel = CHANNELS.runs;
  private createdInstances = false;
  /** The runs whose status this pass changed, for its NOTIFY. */
  private changedRuns: ChangedRun[] = [];
  /** The runs this pass placed and leased to `starter`, which starts them once the pass has committed. */
  private startHere: PlacedRun[] = [];
  private readonly queue = new QueuedRuns();
  private readonly instances = new LiveInstances();

  constructor(private readonly db: Db, private readonly pool: BackendPool, private readonly starter?: PlacedRunStarter) {}

  /** Runs new in the queue, and runs that ended (their instance or blocks are free again). */
  hears(payload: string): boolean {
    return concerns(payload, { statuses: ['submitted', 'done', 'failed', 'terminated'], family: true });
  }

  async pass(): Promise<void> {
    const queuedProjects = await projectsQueued(this.db);
    if (queuedProjects.size === 0) return;
    const offers = new Map<string, OfferListing>();
    for (const [projectId, fleets] of queuedProjects) {
      for (const fleet of fleets) offers.set(fleet.id, await this.pool.offers(projectId, fleet.backends));
    }
    const projects = [...queuedProjects.keys()];
    this.createdInstances = false;
    this.changedRuns = [];
    this.startHere = [];
    const changed = await this.db.transaction(async (tx) => {
      if (!(await trySchedulerLock(tx))) return false;
      // Read under the lock: another server may have placed some of these runs since, and one placed twice runs twice.
      const queued = await this.queue.read(tx);
      let any = false;
      for (const projectId of projects) {
        const runs = queued.filter((r) => r.project_id === projectId);
        any = (await this.scheduleProject(tx, projectId, runs, offers)) || any;
      }
      return any;
    });
    if (changed && this.startHere.length > 0) this.starter!.startPlaced(this.startHere);
    if (this.createdInstances) await this.db.notify(CHANNELS.instances);
    if (changed) await this.db.notify(CHANNELS.runs, runChange(this.changedRuns));
  }

  private async scheduleProject(tx: Queryable, projectId: string, runs: QueuedRun[], offers: Map<string, OfferListing>): Promise<boolean> {
    const fleets = await listActiveFleets(tx, projectId);
    const instances = await this.instances.read(tx, projectId);
    const held = await blocksHeld(tx, projectId);
    let changed = false;
    const reasons: QueueReason[] = [];
    const budget = await BudgetGate.open(tx, projectId, offers);
    // Runs that need the same and may go to the same places are placed alike, until a placement changes what is free.
    const placements = new Map<string, Placement>();
    for (const run of runs) {
      if (run.desired !== 'run') {
        await this.finishUnplaced(tx, projectId, run, 'terminated', run.desired === 'abort' ? 'aborted_by_user' : 'stopped_by_user', 'stopped before it started');
        changed = true;
        continue;
      }
      const placed = placements.get(run.placementKey) ?? (run.nodes > 1 ? placeNodes(run, fleets, instances, offers) : place(run, fleets, instances, offers, held));
      placements.set(run.placementKey, placed);
      const budgetHold = budget?.admit(newInstances(placed)) ?? null;
      const placement: Placement = budgetHold ? { kind: 'wait', message: budgetHold } : placed;
      if (placement.kind === 'wait') {
        if (placement.message !== run.status_message) reasons.push({ id: run.id, version: run.version, message: placement.message });
        continue;
      }
      const retry = placement.kind === 'fail' && retryDecision({ ...run, firstSubmittedAt: run.first_submitted_at }, placement.reason);
      if (placement.kind === 'fail' && retry) {
        // Nothing ran, so no new attempt: the run keeps its place in the queue until retry.duration runs out.
        const message = `waiting: ${placement.message}; retrying on ${retry.event} until ${retry.until.toISOString()}`;
        if (message !== run.status_message) reasons.push({ id: run.id, version: run.version, message });
        continue;
      }
      placements.clear();
      changed = (await this.apply(tx, projectId, run, placement, instances, held)) || changed;
    }
    if (reasons.length > 0) this.queue.written(reasons, await writeQueueReasons(tx, reasons));
    return changed;
  }

  private async apply(tx: Queryable, projectId: string, run: QueuedRun, placement: Exclude<Placement, { kind: 'wait' }>, instances: InstanceRecord[], held: BlocksHeld): Promise<boolean> {
    switch (placement.kind) {
      case 'fail':
        await this.finishUnplaced(tx, projectId, run, 'failed', placement.reason, placement.message);
        return true;
      case 'blocks':
        return this.takeBlocks(tx, projectId, run, placement, held);
      case 'provision':
        if (isSplit(placement.fleet.spec)) return this.provisionShared(tx, projectId, run, placement, instances);
      // falls through: an instance of a fleet not split into blocks is the run's own from the start
      case 'instance': {
        const taken = await this.take(tx, projectId, run, placement, run.id, instances);
        if (!taken) return false;
        const ready = placement.kind === 'instance' && placement.ready;
        await this.placed(tx, projectId, run, placement.fleet, taken.instance, { message: taken.message, fleetId: placement.fleet.id, instanceId: taken.instance.id, blocks: null }, ready);
        return true;
      }
      case 'nodes':
        return this.startNodes(tx, projectId, run, placement, instances);
    }
  }

  /** Gives the instance chosen (or a new one) to `jobId`; null when another took it first. */
  private async take(tx: Queryable, projectId: string, run: QueuedRun, choice: NodeChoice, jobId: string, instances: InstanceRecord[]): Promise<{ instance: InstanceRecord; message: string } | null> {
    if (choice.kind === 'instance') {
      const { instance, ready } = choice;
      if (!(await giveInstanceTo(tx, instance.id, jobId, ready))) return null;
      instance.runId = jobId;
      if (ready) instance.status = 'busy';
      return { instance, message: ready ? `starting on ${instance.name}` : `waiting for ${instance.name} to be provisioned` };
    }
    const instance = await insertInstance(tx, {
      projectId, fleetId: choice.fleet.id, fleetName: choice.fleet.name, backend: choice.backend, requirement: choice.requirement, runId: jobId,
    });
    instances.push(instance);
    this.createdInstances = true;
    await recordEvent(tx, { projectId, objectKind: 'instance', objectId: instance.id, objectName: instance.name, reason: 'Created', message: `created for run ${run.name} (${describeRequirement(choice.requirement)}) on ${choice.backend}` });
    return { instance, message: `provisioning ${instance.name} on ${choice.backend}` };
  }

  /** Gives the run blocks of a shared instance, which turns busy while any are held. */
  private async takeBlocks(tx: Queryable, projectId: string, run: QueuedRun, placement: Extract<SinglePlacement, { kind: 'blocks' }>, held: BlocksHeld): Promise<boolean> {
    const { instance, blocks, fleet } = placement;
    if (!(await takeBlocksOf(tx, instance.id))) return false;
    instance.status = 'busy';
    held.set(instance.id, [...(held.get(instance.id) ?? []), ...blocks]);
    const total = blockCount(fleet.spec, instance.offer!.gpu.count, instance.sshHost?.name ?? null);
    const message = `starting on ${instance.name}, block${blocks.length === 1 ? '' : 's'} ${blocks.join(', ')} of ${total}`;
    await this.placed(tx, projectId, run, fleet, instance, { message, fleetId: fleet.id, instanceId: instance.id, blocks }, true);
    return true;
  }

  /** A new instance for a fleet split into blocks belongs to no run: the run waits for it, and takes blocks once it is up. */
  private async provisionShared(tx: Queryable, projectId: string, run: QueuedRun, choice: Extract<NodeChoice, { kind: 'provision' }>, instances: InstanceRecord[]): Promise<boolean> {
    const instance = await insertInstance(tx, {
      projectId, fleetId: choice.fleet.id, fleetName: choice.fleet.name, backend: choice.backend, requirement: choice.fleet.requirement, runId: null,
    });
    instances.push(instance);
    this.createdInstances = true;
    await recordEvent(tx, { projectId, objectKind: 'instance', objectId: instance.id, objectName: instance.name, reason: 'Created', message: `created for run ${run.name} on ${choice.backend}; fleet ${choice.fleet.name} shares it in blocks` });
    await setQueuedRunMessage(tx, run.id, sharedWait(instance, choice.fleet));
    return true;
  }

  /**
   * Places every node of a multi-node task, or none: the instances chosen are locked and checked first, so no
   * node takes an instance while another waits for one. A crash before the commit leaves nothing taken.
   */
  private async startNodes(tx: Queryable, projectId: string, run: QueuedRun, placement: Extract<Placement, { kind: 'nodes' }>, instances: InstanceRecord[]): Promise<boolean> {
    const chosen = placement.nodes.flatMap((node) => (node.kind === 'instance' ? [node.instance.id] : []));
    if ((await lockFreeInstances(tx, chosen)) < chosen.length) return false;
    const names: string[] = [];
    for (const [rank, choice] of placement.nodes.entries()) {
      const id = randomUUID();
      const taken = await this.take(tx, projectId, run, choice, id, instances);
      if (!taken) throw new Error(`instance of node ${rank} of run ${run.name} was taken while locked`);
      await insertNode(tx, run.id, { id, rank, fleetId: placement.fleet.id, instanceId: taken.instance.id, message: taken.message });
      names.push(taken.instance.name);
    }
    const message = `${placement.nodes.length} nodes on ${names.join(', ')}`;
    await markNodesPlaced(tx, run.id, message, placement.fleet.id);
    await recordEvent(tx, runEvent({ ...run, projectId }, 'Provisioning', `fleet ${placement.fleet.name}: ${message}`));
    this.changedRuns.push({ ...run, status: 'provisioning' });
    return true;
  }

  /**
   * Marks the run placed. On an instance that is up (`ready`), the run is leased to this server's start loop in the same
   * write, to be handed over after the commit; a server killed before it starts the job leaves a lease that runs out,
   * and any server's start loop then claims the run as before.
   */
  private async placed(tx: Queryable, projectId: string, run: QueuedRun, fleet: FleetRecord, instance: InstanceRecord, place: RunPlace, ready: boolean): Promise<void> {
    const lease = ready && this.starter ? { owner: this.starter.owner, ms: this.starter.leaseMs } : null;
    const row = await markPlaced(tx, run.id, place, lease, runEvent({ ...run, projectId }, 'Provisioning', `fleet ${fleet.name}: ${place.message}`));
    const startedByPlacer = lease !== null && row.lease_owner === lease.owner;
    if (startedByPlacer) this.startHere.push({ row, instance: { ...instance }, fleet });
    this.changedRuns.push({ ...run, status: 'provisioning', startedByPlacer });
  }

  private async finishUnplaced(tx: Queryable, projectId: string, run: QueuedRun, status: 'failed' | 'terminated', reason: string, message: string): Promise<void> {
    await finishUnplaced(tx, run.id, status, reason, message);
    await recordEvent(tx, runEvent({ ...run, projectId }, status === 'failed' ? 'Failed' : 'Terminated', `${reason}: ${message}`));
    this.changedRuns.push({ ...run, status });
  }
}

function sharedWait(instance: InstanceRecord, fleet: FleetRecord): string {
  return `waiting for ${instance.name} to be provisioned: fleet ${fleet.name} shares each instance in blocks`;
}

/** Whether some blocks of an instance of this offer would give the run what it needs. */
function blocksCanHold(offer: Offer, fleet: FleetRecord, requirement: ResourceRequirement): boolean {
  const total = blockCount(fleet.spec, offer.gpu.count);
  return Array.from({ length: total }, (_, index) => index + 1).some((count) => offerSatisfies(blockShare(offer, total, count), requirement));
}

/** The fewest free blocks of a shared instance that give the run what it needs; null when its free blocks cannot. */
function freeBlocksFor(requirement: ResourceRequirement, fleet: FleetRecord, instance: InstanceRecord, held: BlocksHeld): number[] | null {
  const offer = instance.offer!;
  const total = blockCount(fleet.spec, offer.gpu.count, instance.sshHost?.name ?? null);
  const taken = held.get(instance.id) ?? [];
  const free: number[] = [];
  for (let block = 0; block < total; block++) if (!taken.includes(block)) free.push(block);
  for (let count = 1; count <= free.length; count++) {
    if (offerSatisfies(blockShare(offer, total, count), requirement)) return free.slice(0, count);
  }
  return null;
}

/**
 * The first instance up of these shared fleets, in their order, whose free blocks give the run what it needs, and
 * those blocks. It stops there: while a fleet of a thousand instances fills, each run placed would otherwise weigh
 * every instance's blocks.
 */
function firstFreeBlocks(requirement: ResourceRequirement, fleets: FleetRecord[], instances: InstanceRecord[], allows: (backend: string) => boolean, held: BlocksHeld): { fleet: FleetRecord; instance: InstanceRecord; blocks: number[] } | undefined {
  for (const fleet of fleets) {
    for (const instance of instances) {
      if (instance.fleetId !== fleet.id || (instance.status !== 'idle' && instance.status !== 'busy') || instance.runId !== null || instance.offer === null || !allows(instance.backend)) continue;
      const blocks = freeBlocksFor(requirement, fleet, instance, held);
      if (blocks) return { fleet, instance, blocks };
    }
  }
  return undefined;
}

/** Decides where one run goes, given what earlier runs of this pass already took; `held` are the blocks runs hold on shared instances. */
export function place(run: Pick<QueuedRun, 'requirement'> & { spec?: RunPlaces }, fleets: FleetRecord[], instances: InstanceRecord[], offers: Map<string, OfferListing>, held: BlocksHeld = new Map()): SinglePlacement {
  if (fleets.length === 0) {
    return { kind: 'wait', noFleet: true, message: 'waiting: no fleet: this project has no active fleet; the run waits until one is applied (e.g. examples/fleets/local.yml)' };
  }
  const targets = targetedInstances(run.spec ?? {}, fleets, instances);
  if (targets?.size === 0) {
    return { kind: 'fail', reason: 'no_fleet_matches', message: `no instance matches instances (${describeSelectors(run.spec!.instances!)}): the run is placed only on the existing instances it names, and none is provisioned for it` };
  }
  if (targets) instances = instances.filter((i) => targets.has(i.id));
  const choice = chooseFleets(run.spec ?? {}, fleets);
  if (choice.none) return { kind: 'wait', noFleet: true, message: `waiting: ${choice.none}` };
  const elsewhere = choice.excluded.map((reason) => `; ${reason}`).join('');
  // A fleet split into blocks makes its instances as it says; the run needs a share of one, weighed block by block.
  const candidates = choice.fleets
    .map((fleet) => ({ fleet, requirement: isSplit(fleet.spec) ? fleet.requirement : intersectRequirements(fleet.requirement, run.requirement) }))
    .filter((c): c is { fleet: FleetRecord; requirement: ResourceRequirement } => c.requirement !== null);
  if (candidates.length === 0) {
    const offered = choice.fleets.map((f) => `${f.name} (${describeRequirement(f.requirement)})`).join(', ');
    return { kind: 'fail', reason: 'no_fleet_matches', message: `no fleet matches: the run needs ${describeRequirement(run.requirement)}; the fleets offer ${offered}${elsewhere}` };
  }
  // An SSH host's resources are known once it was reached; until then nothing is placed on it.
  const fits = (i: InstanceRecord, fleet: FleetRecord) => i.fleetId === fleet.id && i.runId === null && choice.allows(i.backend) && !isSplit(fleet.spec)
    && (i.offer ? offerSatisfies(i.offer, run.requirement) : !i.sshHost && intersectRequirements(i.requirement, run.requirement) !== null && withinPriceLimit(i.requirement, run.requirement))
    && !isDraining(fleet, i);
  const splitFleets = candidates.filter(({ fleet }) => isSplit(fleet.spec)).map(({ fleet }) => fleet);
  const shared = firstFreeBlocks(run.requirement, splitFleets, instances, choice.allows, held);
  if (shared) return { kind: 'blocks', ...shared };
  for (const fleet of splitFleets) {
    const starting = instances.find((i) => i.fleetId === fleet.id && (i.status === 'pending' || i.status === 'provisioning') && choice.allows(i.backend));
    if (starting) return { kind: 'wait', message: sharedWait(starting, fleet) };
  }
  const idle = candidates.flatMap(({ fleet }) => instances.filter((i) => i.status === 'idle' && fits(i, fleet)).map((instance) => ({ fleet, instance })))
    .sort((a, b) => (a.instance.offer?.pricePerHour ?? 0) - (b.instance.offer?.pricePerHour ?? 0))[0];
  if (idle) return { kind: 'instance', ...idle, ready: true };
  for (const { fleet } of candidates) {
    const starting = instances.find((i) => (i.status === 'pending' || i.status === 'provisioning') && fits(i, fleet));
    if (starting) return { kind: 'instance', fleet, instance: starting, ready: false };
  }
  if (targets) return targetsTaken(run.requirement, run.spec!.instances!, instances, elsewhere);
  const reasons: string[] = [];
  let onlyNoOffers = true;
  for (const { fleet, requirement } of candidates) {
    const listing = offers.get(fleet.id) ?? { offers: [], backends: [], errors: [] };
    const allowed = listing.offers.filter((o: Offer) => choice.allows(o.backend));
    const matching = allowed.filter((o) => offerSatisfies(o, requirement) && (!isSplit(fleet.spec) || blocksCanHold(o, fleet, run.requirement)));
    const fleetInstances = instances.filter((i) => i.fleetId === fleet.id);
    if (fleet.backends.includes('ssh')) {
      const shortfall = sshFleetShortfall(fleet, fleetInstances, requirement);
      reasons.push(shortfall.reason);
      onlyNoOffers &&= shortfall.fail;
      continue;
    }
    if (matching.length === 0 && listing.errors.length === 0 && !fleetInstances.some((i) => i.offer && offerSatisfies(i.offer, run.requirement))) {
      const tooDear = priceRefusal(requirement, allowed);
      if (tooDear) {
        // Prices move (spot, other backends' offers): the run waits under its limit rather than failing.
        onlyNoOffers = false;
        reasons.push(`${tooDear} in fleet ${fleet.name}`);
        continue;
      }
      const unoffered = unofferedModels(requirement, allowed);
      reasons.push(`no offers: no ${fleet.backends.join('/')} offer matches ${describeRequirement(requirement)} in fleet ${fleet.name}${unoffered ? ` (${unoffered})` : ''}`);
      continue;
    }
    onlyNoOffers = false;
    if (fleet.nodesMax !== null && fleetInstances.length >= fleet.nodesMax) {
      reasons.push(`fleet ${fleet.name} is at its maximum of ${fleet.nodesMax} node${fleet.nodesMax === 1 ? '' : 's'}: ${countByStatus(fleetInstances)}`);
      continue;
    }
    const available = matching.filter((o) => o.availability === 'available');
    if (available.length > 0) return { kind: 'provision', fleet, backend: available[0].backend, requirement };
    if (matching.length > 0) {
      reasons.push(`no capacity: the ${matching.length} ${fleet.backends.join('/')} offer${matching.length === 1 ? '' : 's'} matching ${describeRequirement(requirement)} in fleet ${fleet.name} ${matching.length === 1 ? 'is' : 'are'} sold out`);
    } else {
      reasons.push(`fleet ${fleet.name}: ${listing.errors.join('; ')}`);
    }
  }
  if (onlyNoOffers) return { kind: 'fail', reason: 'no_offers', message: `${reasons.join('; ')}${elsewhere}` };
  return { kind: 'wait', message: `waiting: ${reasons.join('; ')}${elsewhere}` };
}

/**
 * A run that names its instances, none of which can take it now: it waits for one that is busy, and fails when none of
 * them has what it needs, as no other instance is provisioned for it.
 */
function targetsTaken(requirement: ResourceRequirement, selectors: NonNullable<RunPlaces['instances']>, targeted: InstanceRecord[], elsewhere: string): SinglePlacement {
  const named = `the instances it names (${describeSelectors(selectors)})`;
  if (targeted.every((i) => i.offer !== null && !offerSatisfies(i.offer, requirement))) {
    return { kind: 'fail', reason: 'no_fleet_matches', message: `no instance matches: the run needs ${describeRequirement(requirement)}, and ${named} have ${targeted.map((i) => `${i.name} (${formatGpu(i.offer!.gpu)}, ${i.offer!.cpus} CPUs)`).join(', ')}${elsewhere}` };
  }
  return { kind: 'wait', message: `waiting: the run takes only ${named}, and none is free now: ${targeted.map((i) => `${i.name} ${i.status}`).join(', ')}${elsewhere}` };
}

/**
 * Decides where every node of a multi-node task goes, all in one fleet, or that they wait: never a part of them.
 * Each node is placed as a run of its own would be, given what the nodes before it took.
 */
export function placeNodes(run: Pick<QueuedRun, 'requirement' | 'nodes'> & { spec?: RunPlaces }, fleets: FleetRecord[], instances: InstanceRecord[], offers: Map<string, OfferListing>): Placement {
  const single = place(run, fleets, instances, offers);
  if (single.kind === 'fail') return single;
  const reasons: string[] = [];
  for (const fleet of chooseFleets(run.spec ?? {}, fleets).fleets.filter((f) => isSplit(f.spec) || intersectRequirements(f.requirement, run.requirement) !== null)) {
    if (isSplit(fleet.spec)) {
      reasons.push(`fleet ${fleet.name} shares its instances in blocks, and the nodes of a multi-node task take whole instances`);
      continue;
    }
    if (fleet.nodesMax !== null && fleet.nodesMax < run.nodes) {
      reasons.push(`fleet ${fleet.name} has at most ${fleet.nodesMax} node${fleet.nodesMax === 1 ? '' : 's'} and the task needs ${run.nodes} (nodes: ${run.nodes})`);
      continue;
    }
    const taken = [...instances];
    const nodes: NodeChoice[] = [];
    for (let rank = 0; rank < run.nodes; rank++) {
      const next = place(run, [fleet], taken, offers);
      if (next.kind !== 'instance' && next.kind !== 'provision') {
        const why = next.kind === 'blocks' ? 'its instances are shared in blocks' : next.message.replace(/^waiting: /, '');
        reasons.push(`${rank} of the ${run.nodes} nodes fit in fleet ${fleet.name} now; the next: ${why}`);
        break;
      }
      nodes.push(next);
      if (next.kind === 'instance') taken[taken.indexOf(next.instance)] = { ...next.instance, runId: 'another node' };
      else taken.push({ fleetId: fleet.id, status: 'pending', runId: 'another node', offer: null, requirement: next.requirement } as InstanceRecord);
    }
    if (nodes.length === run.nodes) return { kind: 'nodes', fleet, nodes };
  }
  return reasons.length === 0 ? single : { kind: 'wait', message: `waiting for ${run.nodes} instances at once: ${reasons.join('; ')}` };
}

/** Whether an instance still without an offer can only be bought within the run's max_price. */
function withinPriceLimit(instance: ResourceRequirement, run: ResourceRequirement): boolean {
  return run.maxPrice === undefined || (instance.maxPrice !== undefined && instance.maxPrice <= run.maxPrice);
}

const STATUS_ORDER: readonly InstanceStatus[] = ['pending', 'provisioning', 'idle', 'busy', 'terminating'];

/** `1 busy, 1 terminating`: what holds a fleet's places, so that a user sees an instance that is only going away. */
function countByStatus(instances: InstanceRecord[]): string {
  return STATUS_ORDER
    .map((status) => ({ status, count: instances.filter((i) => i.status === status).length }))
    .filter(({ count }) => count > 0)
    .map(({ status, count }) => `${count} ${status}`)
    .join(', ');
}
