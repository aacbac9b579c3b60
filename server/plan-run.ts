import { budgetRunway } from '../api/costs.js';
import { cronExpressions } from '../api/cron.js';
import { blockCount, blockShare } from '../api/blocks.js';
import { fieldsNotActedOn, type JobRuntime } from '../api/not-acted-on.js';
import type { RunPlan } from '../api/objects.js';
import { replicaGroupsOf } from '../api/replica-groups.js';
import { describeRequirementInWords, intersectRequirements, normalizeResources, offerSatisfies } from '../api/resources.js';
import { serviceSettings } from '../api/service-settings.js';
import type { RunSpec } from '../api/spec.js';
import { FINISHED_RUN_STATUSES } from '../api/status.js';
import { AgentClient } from '../agent/client.js';
import { fixedJobRuntime } from '../backends/registry.js';
import type { OfferListing } from '../controllers/backend-pool.js';
import { chooseFleets } from '../controllers/placement-filter.js';
import { retryDecision } from '../controllers/retry-policy.js';
import { newInstances, place, placeNodes } from '../controllers/scheduler.js';
import { budgetView } from '../store/budgets.js';
import { listActiveFleets, type FleetDesired, type FleetRecord } from '../store/fleets.js';
import { listProjectInstances } from '../store/instances.js';
import type { ProjectRecord } from '../store/projects.js';
import { queuedAtOrAbove } from '../store/run-queue.js';
import { blocksHeld, getRunByName, type RunRecord } from '../store/runs.js';
import { isLiveSchedule } from '../store/schedules.js';
import type { ServerContext } from './context.js';
import { firstTick, isLiveService, stillActive } from './submit-run.js';

/** Offers a plan shows; it says how many more there are. */
const PLANNED_OFFERS = 5;
/** A plan asks an idle instance's agent how it runs jobs; a plan never waits long on one that does not answer. */
const AGENT_QUESTION_TIMEOUT_MS = 1000;

type Placement = ReturnType<typeof placeNodes>;

/** The project's active fleets as they will be once `applying` is written: updated in place, new ones last. */
function fleetsOnceApplied(active: FleetRecord[], applying: FleetDesired[], projectId: string): FleetRecord[] {
  const byName = new Map(active.map((fleet) => [fleet.name, fleet]));
  for (const desired of applying) {
    const current = byName.get(desired.name)
      ?? { id: `applying:${desired.name}`, projectId, generation: 0, status: 'active', statusMessage: '', deleted: false, cluster: null, provisionTarget: null, appliedAt: new Date(), createdAt: new Date() };
    byName.set(desired.name, { ...current, nodesTarget: desired.nodesMin, ...desired });
  }
  return [...byName.values()];
}

/**
 * How the instance the run would land on runs its jobs: its agent says so when it is up; otherwise the
 * project's config does, when every backend it could come from fixes its runtime.
 */
async function landingRuntime(project: ProjectRecord, placement: Placement, candidates: FleetRecord[]): Promise<JobRuntime | null> {
  if ((placement.kind === 'instance' || placement.kind === 'blocks') && placement.instance.agentUrl) {
    const { agentUrl, agentToken } = placement.instance;
    const health = await new AgentClient(agentUrl, agentToken, { timeoutMs: AGENT_QUESTION_TIMEOUT_MS }).health().catch(() => null);
    return health?.runtime ?? null;
  }
  const backends = placement.kind === 'instance' ? [placement.instance.backend]
    : placement.kind === 'provision' ? [placement.backend]
      : [...new Set(candidates.flatMap((fleet) => fleet.backends))];
  const runtimes = new Set(backends.map((type) => {
    const config = project.backends.find((b) => b.type === type);
    return config ? fixedJobRuntime(config) : null;
  }));
  const [only] = runtimes;
  return runtimes.size === 1 ? only ?? null : null;
}

/**
 * The plan's problem, and what it does to the run if the run is submitted anyway; `live` is an active run that holds its
 * name. A schedule, and a service that may run no replica, place nothing now, and an update of a live service
 * rolls out while its replicas serve (a generation that cannot be placed waits): their problem holds nothing yet.
 */
function planProblem(spec: RunSpec, placement: ReturnType<typeof placeNodes>, live: RunRecord | null, updatesLiveService: boolean): Pick<RunPlan, 'problem' | 'blocking'> {
  if (live) return { problem: stillActive(live), blocking: 'name_in_use' };
  if (spec.schedule || (spec.type === 'service' && (updatesLiveService || serviceSettings(spec).replicas.min === 0))) {
    return { problem: placement.kind === 'fail' || placement.kind === 'wait' ? placement.message : null, blocking: null };
  }
  if (placement.kind === 'fail') {
    const retried = retryDecision({ spec: spec as Record<string, unknown>, replica: null, firstSubmittedAt: new Date(), desired: 'run' }, placement.reason);
    return { problem: placement.message, blocking: retried ? null : 'fails' };
  }
  if (placement.kind === 'wait') return { problem: placement.message, blocking: placement.noFleet ? 'no_fleet' : null };
  return { problem: null, blocking: null };
}

/** The free blocks of a shared instance that the run would take, and their GPUs. */
function blocksPlan(placement: Extract<ReturnType<typeof place>, { kind: 'blocks' }>, queuedBefore: number): RunPlan['instance'] {
  const { instance, fleet, blocks } = placement;
  const offer = instance.offer!;
  const total = blockCount(fleet.spec, offer.gpu.count, instance.sshHost?.name ?? null);
  return {
    state: 'idle', name: queuedBefore === 0 ? instance.name : null, fleet: fleet.name,
    gpu: blockShare(offer, total, blocks.length).gpu, pricePerHour: offer.pricePerHour,
    blocks: `block${blocks.length === 1 ? '' : 's'} ${blocks.join(', ')} of ${total}`,
  };
}

/** What the placement pays per hour: the instance's price, or `cheapest` for each new one. */
function plannedPrice(placement: ReturnType<typeof placeNodes>, cheapest: number | null): number | null {
  const choices = placement.kind === 'nodes' ? placement.nodes : placement.kind === 'instance' || placement.kind === 'provision' ? [placement] : [];
  if (choices.length === 0) return null;
  const prices = choices.map((choice) => (choice.kind === 'instance' ? choice.instance.offer?.pricePerHour ?? null : cheapest));
  return prices.some((p) => p === null) ? null : prices.reduce((sum: number, p) => sum + p!, 0);
}

/** What the plan places: the run's spec, or for a service with replica groups the spec of its first group. */
function placedSpec(spec: RunSpec): RunSpec {
  return spec.type === 'service' ? replicaGroupsOf(spec)[0]!.spec : spec;
}

/**
 * What applying the run would do now, decided as the scheduler decides (same fleets, same instance order):
 * the fleets it fits, the instance it would take, the best offers, and the fields that will not do what they say.
 * `applying` are fleets written in the same apply.
 */
export async function planRun(server: ServerContext, project: ProjectRecord, spec: RunSpec, applying: FleetDesired[]): Promise<RunPlan> {
  const { db, pool } = server;
  const placed = placedSpec(spec);
  // As the scheduler reads a queued run (controllers/queued-runs.ts): its spot_policy is part of what it needs.
  const requirement = { ...normalizeResources(placed.resources, 'run', placed.max_price), ...(placed.spot_policy ? { spot: placed.spot_policy } : {}) };
  const fleets = fleetsOnceApplied(await listActiveFleets(db, project.id), applying, project.id);
  const instances = await listProjectInstances(db, project.id);
  const listings = new Map<string, OfferListing>();
  for (const fleet of fleets) listings.set(fleet.id, await pool.offers(project.id, fleet.backends, { fresh: true }));
  const nodes = spec.type === 'task' ? spec.nodes ?? 1 : 1;
  const placement = nodes > 1 ? placeNodes({ requirement, nodes, spec }, fleets, instances, listings) : place({ requirement, spec: placed }, fleets, instances, listings, await blocksHeld(db, project.id));
  const choice = chooseFleets(placed, fleets);
  const candidates = choice.fleets.filter((f) => intersectRequirements(f.requirement, requirement) !== null);
  const matching = candidates.flatMap((fleet) => {
    const both = intersectRequirements(fleet.requirement, requirement)!;
    return (listings.get(fleet.id)?.offers ?? []).filter((o) => choice.allows(o.backend) && offerSatisfies(o, both)).map((o) => ({ ...o, fleet: fleet.name }));
  }).sort((a, b) => a.pricePerHour - b.pricePerHour);
  const offers = matching.slice(0, PLANNED_OFFERS);
  const existing = spec.name ? await getRunByName(db, project.id, spec.name) : null;
  const existingService = spec.type === 'service' && existing !== null && isLiveService(existing);
  const nextTickAt = firstTick(spec);
  const existingSchedule = nextTickAt !== undefined && existing !== null && isLiveSchedule(existing);
  const before = await queuedAtOrAbove(db, project.id, spec.priority ?? 0);
  const runtime = await landingRuntime(project, placement, candidates);
  const pricePerHour = plannedPrice(placement, offers[0]?.pricePerHour ?? null);
  const budget = await budgetView(db, project);
  const holding = budget.holding !== null && newInstances(placement).length > 0 ? budget.holding : null;
  const problem = planProblem(spec, placement, existing && !existingService && !existingSchedule && !FINISHED_RUN_STATUSES.includes(existing.status) ? existing : null, existingService);
  return {
    action: existingService || existingSchedule ? 'update' : existing ? 'replace' : 'create',
    name: spec.name ?? null,
    requirement: describeRequirementInWords(requirement),
    fleets: candidates.map((f) => f.name),
    instance: placement.kind === 'blocks' ? blocksPlan(placement, before) : placement.kind !== 'instance' ? null : {
      state: placement.ready ? 'idle' : 'starting',
      name: before === 0 ? placement.instance.name : null,
      fleet: placement.fleet.name,
      gpu: placement.instance.offer?.gpu ?? null,
      pricePerHour: placement.instance.offer?.pricePerHour ?? null,
    },
    queuedBefore: before,
    pricePerHour,
    budget: budget.budget && {
      amount: budget.budget.amount, period: budget.budget.period, spent: budget.spent, burnPerHour: budget.burnPerHour,
      lastsFor: budgetRunway(budget.budget.amount - budget.spent, budget.burnPerHour + (pricePerHour ?? 0)),
    },
    runtime,
    notActedOn: fieldsNotActedOn(placed, runtime),
    offers,
    offersTotal: matching.length,
    offerErrors: [...new Set([...listings.values()].flatMap((listing) => listing.errors))],
    ...(problem.problem === null && holding ? { problem: holding, blocking: null } : problem),
    ...(nextTickAt && spec.schedule ? { schedule: { cron: cronExpressions(spec.schedule), nextRunAt: nextTickAt.toISOString() } } : {}),
  };
}
