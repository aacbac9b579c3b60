import { Type, type Static } from '@sinclair/typebox';
import { formatGpuParts, modelsMatch, parseGpu } from './gpu.js';
import { formatDollars, type Offer } from './offer.js';
import type { Resources } from './spec.js';
import {
  formatRange, formatSize, inRange, intersectRanges, OPEN_RANGE, parseCountRange, parseSize, parseSizeRange, Range,
} from './quantity.js';

export { KNOWN_GPUS, formatGpu } from './gpu.js';
export { Range, parseSize, formatSize } from './quantity.js';

/** The normalised resources block that the server stores and matches offers against. Sizes are MiB. */
export const ResourceRequirement = Type.Object({
  gpu: Type.Object({
    models: Type.Union([Type.Array(Type.String()), Type.Null()], { description: 'Canonical model names; null accepts any model' }),
    memoryMib: Range,
    count: Range,
  }),
  cpus: Range,
  memoryMib: Range,
  diskMib: Range,
  shmSizeMib: Type.Union([Type.Number(), Type.Null()]),
  spot: Type.Optional(Type.Union([Type.Literal('spot'), Type.Literal('on-demand'), Type.Literal('auto')], {
    description: 'A run\'s spot_policy: spot offers only, on-demand ones only (also when left out), or either',
  })),
  maxPrice: Type.Optional(Type.Number({ exclusiveMinimum: 0, description: 'max_price: the most an offer may cost, in dollars per hour per instance' })),
});
export type ResourceRequirement = Static<typeof ResourceRequirement>;

const CPU_RULES = { least: 1, bounded: false, what: 'CPU count' };

/** dstack's names of CPU architectures; every machine the backends here offer is x86. */
const CPU_ARCHITECTURES: Record<string, 'x86' | 'arm'> = { x86: 'x86', x86_64: 'x86', amd64: 'x86', arm: 'arm', arm64: 'arm', aarch64: 'arm' };

/** CPUs as written: a count or range, optionally with the architecture in any order (`x86:8..`, `16`, `4..16`). */
export function parseCpu(input: string | number): Range {
  let count: Range | null = null;
  for (const piece of String(input).split(':').map((part) => part.trim())) {
    const arch = CPU_ARCHITECTURES[piece.toLowerCase()];
    if (arch === 'arm') throw new Error(`ARM CPUs are not supported: the machines the backends here offer are x86`);
    if (arch === 'x86') continue;
    if (count !== null) throw new Error(`invalid CPU spec "${input}": it gives the count twice`);
    count = parseCountRange(piece, CPU_RULES);
  }
  return count ?? OPEN_RANGE;
}

/**
 * The requirement a resources block states. Without `gpu`, any machine fits (count `0..`).
 * A `gpu` without a count means exactly one card for a run, and one card or more for a fleet,
 * so that a fleet that names a model can host runs that need several of them.
 */
export function normalizeResources(resources: Resources | undefined, kind: 'fleet' | 'run', maxPrice?: number): ResourceRequirement {
  const gpu = resources?.gpu === undefined ? null : parseGpu(resources.gpu);
  const defaultCount: Range = gpu === null ? { min: 0, max: null } : kind === 'run' ? { min: 1, max: 1 } : { min: 1, max: null };
  return {
    gpu: {
      models: gpu?.models ?? null,
      memoryMib: gpu?.memoryMib ?? OPEN_RANGE,
      count: gpu?.count ?? defaultCount,
    },
    cpus: resources?.cpu === undefined ? OPEN_RANGE : parseCpu(resources.cpu),
    memoryMib: resources?.memory === undefined ? OPEN_RANGE : parseSizeRange(resources.memory),
    diskMib: resources?.disk === undefined ? OPEN_RANGE : parseSizeRange(resources.disk),
    shmSizeMib: resources?.shm_size === undefined ? null : parseSize(resources.shm_size),
    ...(maxPrice === undefined ? {} : { maxPrice }),
  };
}

/** The requirement without its price limit: what an offer must have, whatever it costs. */
export function withoutPriceLimit(req: ResourceRequirement): ResourceRequirement {
  const { maxPrice: _, ...rest } = req;
  return rest;
}

/** Whether a machine offered by a backend meets the requirement. Model and card memory only matter when the offer has GPUs. */
export function offerSatisfies(offer: Offer, req: ResourceRequirement): boolean {
  if (!inRange(offer.gpu.count, req.gpu.count)) return false;
  if (req.spot !== 'auto' && (offer.spot === true) !== (req.spot === 'spot')) return false;
  if (req.maxPrice !== undefined && offer.pricePerHour > req.maxPrice) return false;
  if (offer.gpu.count > 0) {
    if (req.gpu.models !== null && !req.gpu.models.some((model) => modelsMatch(model, offer.gpu.name))) return false;
    if (!inRange(offer.gpu.memoryMib, req.gpu.memoryMib)) return false;
  }
  return inRange(offer.cpus, req.cpus) && inRange(offer.memoryMib, req.memoryMib) && inRange(offer.diskMib, req.diskMib);
}

const NO_GPU_COUNT: Range = { min: 0, max: 0 };

function intersectGpu(a: ResourceRequirement['gpu'], b: ResourceRequirement['gpu']): ResourceRequirement['gpu'] | null {
  const count = intersectRanges(a.count, b.count);
  if (count === null) return null;
  const models = a.models === null ? b.models : b.models === null ? a.models : a.models.filter((m) => b.models!.some((n) => modelsMatch(m, n)));
  const memoryMib = intersectRanges(a.memoryMib, b.memoryMib);
  const cardsConflict = memoryMib === null || (models !== null && models.length === 0);
  if (count.max === 0 || cardsConflict) {
    // Model and card memory say nothing about a machine without GPUs, so such a machine still fits both.
    return inRange(0, count) ? { models: null, memoryMib: OPEN_RANGE, count: NO_GPU_COUNT } : null;
  }
  return { models, memoryMib, count };
}

/**
 * The spot policy both allow, a being a fleet's (or its instance's) and b a run's: a fleet without one, or with
 * `auto`, takes the run's; a run without one is on demand (as offerSatisfies reads it, and as dstack's runs
 * default), so it fits no fleet that is spot only; `spot` and `on-demand` allow nothing together (null).
 */
function intersectSpot(a: ResourceRequirement['spot'], b: ResourceRequirement['spot']): ResourceRequirement['spot'] | null {
  if (a === undefined || a === 'auto') return b;
  const run = b ?? 'on-demand';
  return run === 'auto' || run === a ? a : null;
}

/** What both requirements allow at once, or null when no machine can meet both. */
export function intersectRequirements(a: ResourceRequirement, b: ResourceRequirement): ResourceRequirement | null {
  const gpu = intersectGpu(a.gpu, b.gpu);
  const cpus = intersectRanges(a.cpus, b.cpus);
  const memoryMib = intersectRanges(a.memoryMib, b.memoryMib);
  const diskMib = intersectRanges(a.diskMib, b.diskMib);
  const spot = intersectSpot(a.spot, b.spot);
  if (gpu === null || cpus === null || memoryMib === null || diskMib === null || spot === null) return null;
  const shm = [a.shmSizeMib, b.shmSizeMib].filter((v): v is number => v !== null);
  const prices = [a.maxPrice, b.maxPrice].filter((v): v is number => v !== undefined);
  return {
    gpu, cpus, memoryMib, diskMib, shmSizeMib: shm.length === 0 ? null : Math.max(...shm),
    ...(spot ? { spot } : {}), ...(prices.length === 0 ? {} : { maxPrice: Math.min(...prices) }),
  };
}

function describeGpu(gpu: ResourceRequirement['gpu']): string {
  if (gpu.count.max === 0) return 'no GPU';
  const anyCount = (gpu.count.min === null || gpu.count.min === 0) && gpu.count.max === null;
  const anyCard = gpu.models === null && gpu.memoryMib.min === null && gpu.memoryMib.max === null;
  return anyCount && anyCard ? '' : formatGpuParts(gpu.models, gpu.memoryMib, gpu.count);
}

/** Short text for messages and tables, e.g. `H100:80GB:1..2, disk 100GB..`; `any machine` when nothing is asked. */
export function describeRequirement(req: ResourceRequirement): string {
  const parts = [
    describeGpu(req.gpu),
    labelled('cpu', formatRange(req.cpus)),
    labelled('memory', formatRange(req.memoryMib, formatSize)),
    labelled('disk', formatRange(req.diskMib, formatSize)),
    req.shmSizeMib === null ? '' : `shm ${formatSize(req.shmSizeMib)}`,
    req.spot === 'spot' ? 'spot' : req.spot === 'on-demand' ? 'on demand' : '',
  ].filter((part) => part !== '');
  return parts.length === 0 ? 'any machine' : parts.join(', ');
}

function labelled(label: string, text: string): string {
  return text === '' ? '' : `${label} ${text}`;
}

/** `24 GB or more`, `16 to 32 GB`, `up to 2`, `4`; empty for a range that allows anything. */
function rangeInWords(range: Range, format: (n: number) => string = String): string {
  if (range.min === null && range.max === null) return '';
  if (range.min !== null && range.min === range.max) return format(range.min);
  if (range.max === null) return `${format(range.min!)} or more`;
  if (range.min === null || range.min === 0) return `up to ${format(range.max)}`;
  return `${format(range.min)} to ${format(range.max)}`;
}

/** `1 CPU`, `8 or more CPUs`. */
function countInWords(range: Range, noun: string): string {
  const count = rangeInWords(range);
  return count === '' ? '' : `${count} ${count === '1' ? noun : `${noun}s`}`;
}

const sizeInWords = (mib: number) => formatSize(mib).replace(/([A-Z]+)$/, ' $1');

function gpuInWords(gpu: ResourceRequirement['gpu']): string {
  if (gpu.count.max === 0) return 'no GPU';
  if (describeGpu(gpu) === '') return '';
  const anyCount = (gpu.count.min === null || gpu.count.min === 0) && gpu.count.max === null;
  const noun = gpu.models ? `${gpu.models.join(' or ')} GPU` : 'GPU';
  const memory = rangeInWords(gpu.memoryMib, sizeInWords);
  return `${anyCount ? `any number of ${noun}s` : countInWords(gpu.count, noun)}${memory === '' ? '' : ` with ${memory}`}`;
}

/**
 * The requirement as a person would write it, for plans: `1 or more GPUs with 24 GB or more`,
 * `8 A100 GPUs with 80 GB, 8 or more CPUs, 100 GB or more disk`; `any machine` when nothing is asked.
 */
export function describeRequirementInWords(req: ResourceRequirement): string {
  const memory = rangeInWords(req.memoryMib, sizeInWords);
  const disk = rangeInWords(req.diskMib, sizeInWords);
  const parts = [
    gpuInWords(req.gpu),
    countInWords(req.cpus, 'CPU'),
    memory === '' ? '' : `${memory} memory`,
    disk === '' ? '' : `${disk} disk`,
    req.shmSizeMib === null ? '' : `${sizeInWords(req.shmSizeMib)} shared memory`,
  ].filter((part) => part !== '');
  return parts.length === 0 ? 'any machine' : parts.join(', ');
}

/**
 * When only the price limit keeps every matching offer out, a sentence that says so with the cheapest of them
 * (`no offer at or under $2.00/h: the cheapest matching is H100 at $2.50/h`); null otherwise.
 */
export function priceRefusal(req: ResourceRequirement, offers: readonly Offer[]): string | null {
  if (req.maxPrice === undefined || offers.some((o) => offerSatisfies(o, req))) return null;
  const unlimited = withoutPriceLimit(req);
  const [cheapest] = offers.filter((o) => offerSatisfies(o, unlimited)).sort((a, b) => a.pricePerHour - b.pricePerHour);
  if (!cheapest) return null;
  const machine = cheapest.gpu.count === 0 ? 'a machine without GPUs' : `${cheapest.gpu.name}${cheapest.gpu.count > 1 ? `:${cheapest.gpu.count}` : ''}`;
  return `no offer at or under ${formatDollars(req.maxPrice)}/h: the cheapest matching is ${machine} at ${formatDollars(cheapest.pricePerHour)}/h`;
}

/**
 * When the requirement names GPU models that none of the offers has, a sentence that says so and which
 * models the backends do offer (`no backend offers A100; they offer H100, L4`); null otherwise.
 */
export function unofferedModels(req: ResourceRequirement, offers: readonly Offer[]): string | null {
  const models = req.gpu.models;
  if (models === null || req.gpu.count.max === 0) return null;
  const offered = [...new Set(offers.filter((o) => o.gpu.count > 0).map((o) => o.gpu.name))];
  if (offered.some((name) => models.some((model) => modelsMatch(model, name)))) return null;
  const wanted = models.join(' or ');
  return offered.length === 0
    ? `no backend offers ${wanted}: they offer no GPUs at all`
    : `no backend offers ${wanted}; they offer ${offered.sort().join(', ')}`;
}

/** What dstack asks for when a configuration leaves cpu, memory or disk out; here such a part takes any amount. */
export const DSTACK_DEFAULT_RESOURCES = { cpu: '2..', memory: '8GB..', disk: '100GB..' } as const;

/**
 * The parts of `resources` left out that dstack would fill with its defaults, as the plan says it:
 * `cpu, memory and disk not given: any amount here (dstack's defaults: cpu 2.., memory 8GB.., disk 100GB..)`; null when all are given.
 */
export function dstackDefaultsNote(resources: Resources | undefined): string | null {
  const missing = (Object.keys(DSTACK_DEFAULT_RESOURCES) as (keyof typeof DSTACK_DEFAULT_RESOURCES)[]).filter((part) => resources?.[part] === undefined);
  if (missing.length === 0) return null;
  const names = missing.length === 1 ? missing[0] : `${missing.slice(0, -1).join(', ')} and ${missing.at(-1)}`;
  const defaults = missing.map((part) => `${part} ${DSTACK_DEFAULT_RESOURCES[part]}`).join(', ');
  return `${names} not given: any amount here (dstack's default${missing.length === 1 ? '' : 's'}: ${defaults})`;
}
