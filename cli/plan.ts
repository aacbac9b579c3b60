import { describeFleetNodes } from '../api/fleet-rules.js';
import { sshHosts } from '../api/ssh-fleet.js';
import { formatUtc } from '../api/cron.js';
import { fieldsNotActedOn, type FieldNotActedOn } from '../api/not-acted-on.js';
import { replicaGroupsOf } from '../api/replica-groups.js';
import { describeRequirementInWords, dstackDefaultsNote, normalizeResources } from '../api/resources.js';
import type { FleetPlan, RunPlan } from '../api/objects.js';
import { formatDollars } from '../api/offer.js';
import type { FleetSpec, RunSpec } from '../api/spec.js';
import { formatGpuInfo, formatPrice, formatSize, formatSpot, formatTimeLeft } from './format.js';
import { outputWidth, renderTable } from './table.js';

const INDENT = '    ';

function field(label: string, value = ''): string {
  return `  ${label.padEnd(12)} ${value}`.trimEnd() + '\n';
}

function indented(table: string): string {
  return table.split('\n').filter((line) => line !== '').map((line) => `${INDENT}${line}\n`).join('');
}

function offersTable(offers: FleetPlan['offers'] | RunPlan['offers'], total: number, stream: NodeJS.WriteStream): string {
  const withFleet = offers.some((o) => 'fleet' in o);
  const withSpot = offers.some((o) => o.spot === true);
  const headers = [...(withFleet ? ['fleet'] : []), 'backend', 'gpu', 'cpus', 'memory', 'disk', 'region', '$/h', ...(withSpot ? ['spot'] : []), 'availability'];
  const rows = offers.map((o) => [
    ...(withFleet ? [(o as RunPlan['offers'][number]).fleet] : []),
    o.backend, formatGpuInfo(o.gpu), String(o.cpus), formatSize(o.memoryMib), formatSize(o.diskMib), o.region, formatPrice(o.pricePerHour),
    ...(withSpot ? [formatSpot(o)] : []), o.availability,
  ]);
  const limit = { maxRows: rows.length, total, seeAll: 'orchestrator offer' };
  return indented(renderTable(headers, rows, outputWidth(stream) - INDENT.length, limit));
}

/** One line per backend whose offers could not be refreshed: the offers above may be out of date. */
function offerErrors(plan: FleetPlan | RunPlan): string {
  return plan.offerErrors.map((error, index) => field(index === 0 ? 'warning' : '', error)).join('');
}

/** The requirement, and under it the parts dstack would have filled with its defaults, for those who bring its configurations. */
function resourcesField(spec: FleetSpec | RunSpec, requirement: string): string {
  const note = dstackDefaultsNote(spec.resources);
  return field('resources', requirement) + (note === null ? '' : field('', note));
}

function shown(value: unknown): string {
  if (value === undefined) return '(not set)';
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function shownField(field: string, value: unknown): string {
  return field === 'nodes' && value !== undefined ? describeFleetNodes(value as NonNullable<FleetSpec['nodes']>) : shown(value);
}

/** `nodes: 0..1 → 0..2` for each top-level field that differs. */
function fleetChanges(current: Record<string, unknown>, spec: FleetSpec): string[] {
  const next = spec as unknown as Record<string, unknown>;
  const fields = [...new Set([...Object.keys(current), ...Object.keys(next)])].filter((f) => f !== 'type' && f !== 'name');
  return fields
    .filter((f) => JSON.stringify(current[f]) !== JSON.stringify(next[f]))
    .map((f) => `${f}: ${shownField(f, current[f])} → ${shownField(f, next[f])}`);
}

/** The fleet's plan; `current` is the spec now applied, when the fleet exists. */
export function renderFleetPlan(spec: FleetSpec, plan: FleetPlan, current: Record<string, unknown> | null, stream: NodeJS.WriteStream = process.stderr): string {
  const action = plan.action === 'create' ? 'create'
    : plan.action === 'update' ? `update (generation ${plan.currentGeneration} → ${(plan.currentGeneration ?? 0) + 1})`
      : `unchanged (generation ${plan.currentGeneration})`;
  let text = `fleet ${plan.name}: ${action}\n`;
  if (spec.ssh_config) {
    text += field('hosts', sshHosts(spec.ssh_config).map((host) => `${host.user}@${host.name}${host.proxyJump ? ` via ${host.proxyJump.hostname}` : ''}`).join(', '));
  } else {
    text += field('nodes', describeFleetNodes(spec.nodes!));
    text += field('backends', spec.backends?.join(', ') ?? 'all configured');
    text += resourcesField(spec, plan.requirement);
  }
  if (plan.action === 'update' && current) {
    fleetChanges(current, spec).forEach((change, index) => { text += field(index === 0 ? 'changes' : '', change); });
  }
  if (plan.offers.length > 0) text += field('offers') + offersTable(plan.offers, plan.offersTotal, stream);
  text += notActedOn(fieldsNotActedOn(spec, null));
  text += offerErrors(plan);
  if (plan.problem) text += field('problem', plan.problem);
  return text;
}

export function renderRunPlan(spec: RunSpec, plan: RunPlan, stream: NodeJS.WriteStream = process.stderr): string {
  const name = plan.name ?? '(a name will be generated)';
  const action = plan.blocking === 'name_in_use' ? 'replace (refused while the run of that name is active)'
    : plan.action === 'replace' ? `replace (the finished run ${plan.name} is replaced, and its logs with it)`
    : plan.action === 'update' && plan.schedule ? `update (the scheduled ${spec.type} takes the new spec and schedule from its next run on; runs it submitted carry on)`
      : plan.action === 'update' ? 'update (the live service takes the new spec: a changed spec rolls out one replica at a time; replicas and scaling change in place)'
        : 'create';
  let text = `${spec.type} ${name}: ${action}\n`;
  if (plan.schedule) text += field('schedule', scheduleText(plan.schedule));
  const groups = spec.type === 'service' && Array.isArray(spec.replicas) ? replicaGroupsOf(spec) : null;
  text += groups ? replicaGroupsField(spec) : resourcesField(spec, plan.requirement);
  // The plan places one replica of the first group; it says so.
  const placed = groups ? `group ${groups[0]!.name}: ` : '';
  const nodes = spec.type === 'task' ? spec.nodes ?? 1 : 1;
  if (nodes > 1) text += field('nodes', `${nodes} instances of one fleet, placed together, one job on each`);
  text += field('fleets', plan.fleets.length > 0 ? plan.fleets.join(', ') : 'none match');
  if (plan.instance) {
    text += field('instance', placed + instanceText(plan.instance, plan.queuedBefore));
  } else if (plan.offers.length > 0) {
    text += field('offers', placed + (nodes > 1 ? 'new instances from the cheapest that are available' : 'a new instance from the cheapest that is available')) + offersTable(plan.offers, plan.offersTotal, stream);
  }
  if (plan.pricePerHour !== null) text += field('price', `${formatPrice(plan.pricePerHour)}/h`);
  if (plan.budget) text += field('budget', budgetLine(plan.budget, plan.pricePerHour));
  if (plan.runtime === 'process') {
    text += field('runtime', 'process: the commands run on the machine itself, without a container, so what they call (python, uv, CUDA) must be installed there; to run them in an image (yours, or the default one), use a backend with runtime: docker');
  }
  text += notActedOn(plan.notActedOn);
  text += offerErrors(plan);
  if (plan.problem) text += field('problem', plan.problem);
  return text;
}

/** `$401.20 of $500 this month spent; at $12.50/h ($10/h now + this run) the rest lasts 7h 54m`. */
function budgetLine(budget: NonNullable<RunPlan['budget']>, pricePerHour: number | null): string {
  const spent = `${formatDollars(budget.spent)} of ${formatDollars(budget.amount)} per ${budget.period} spent`;
  if (budget.lastsFor === 'spent') return `${spent}: new instances wait until it resets or is raised (unless on_exceed is warn)`;
  const burn = budget.burnPerHour + (pricePerHour ?? 0);
  return `${spent}; at ${formatPrice(burn)}/h (${formatPrice(budget.burnPerHour)}/h now + this run) the rest lasts ${budget.lastsFor}`;
}

/** A service's replica groups, one line each: `small: 1..3 replicas, GPU 24GB.., commands of its own`. */
function replicaGroupsField(spec: RunSpec): string {
  if (spec.type !== 'service' || !Array.isArray(spec.replicas)) return '';
  return replicaGroupsOf(spec).map(({ name, spec: group }, index) => {
    const own = (['commands', 'image', 'python', 'spot_policy'] as const).filter((f) => (spec.replicas as Array<Record<string, unknown>>)[index]![f] !== undefined);
    const parts = [`${String(group.replicas)} replica${group.replicas === 1 ? '' : 's'}`, describeRequirementInWords(normalizeResources(group.resources, 'run', group.max_price)),
      ...(own.length > 0 ? [`its own ${own.join(', ')}`] : [])];
    return field(index === 0 ? 'groups' : '', `${name}: ${parts.join(', ')}`);
  }).join('');
}

/** The cron expressions, the next run and how soon it is. */
function scheduleText(schedule: NonNullable<RunPlan['schedule']>): string {
  return `${schedule.cron.join(', ')} (UTC): next run at ${formatUtc(new Date(schedule.nextRunAt))}, in ${formatTimeLeft(schedule.nextRunAt)}`;
}

/** `local-0 (idle, ...)` when the scheduler will take that one; `an idle instance of fleet x` when queued runs go first. */
function instanceText(instance: NonNullable<RunPlan['instance']>, queuedBefore: number): string {
  const details = [
    ...(instance.blocks ? [instance.blocks] : []),
    ...(instance.gpu ? [instance.gpu.count === 0 ? 'no GPU' : `GPU ${formatGpuInfo(instance.gpu)}`] : []),
    ...(instance.pricePerHour === null ? [] : [`${formatPrice(instance.pricePerHour)}/h`]),
  ];
  const waits = instance.state === 'starting' ? ', the run waits for it' : '';
  if (instance.name !== null) return `${instance.name} (${[instance.state, `fleet ${instance.fleet}`, ...details].join(', ')})${waits}`;
  const which = instance.state === 'idle' ? 'an idle instance' : 'an instance still starting';
  const queued = `${queuedBefore} ${queuedBefore === 1 ? 'run' : 'runs'} queued before this one may take it first`;
  return `${which} of fleet ${instance.fleet}${details.length > 0 ? ` (${details.join(', ')})` : ''}${waits}; ${queued}`;
}

/** One line per field that will not do what it says: `retry: not acted on yet; the run will not be resubmitted`. */
function notActedOn(fields: readonly FieldNotActedOn[]): string {
  return fields.map(({ field: name, message }, index) => field(index === 0 ? 'ignored' : '', `${name}: ${message}`)).join('');
}
