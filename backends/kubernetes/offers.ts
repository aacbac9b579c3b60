import type { V1Node, V1Pod } from '@kubernetes/client-node';
import type { Offer } from '../../api/offer.js';
import { GPU_RESOURCE, nodeGpuModel } from './gpu-labels.js';

const MIB = 1024 * 1024;
const REGION_LABEL = 'topology.kubernetes.io/region';
const DEFAULT_REGION = 'kubernetes';

/** The resources offers are made of, in the units Kubernetes counts them in (cores, bytes, cards). */
const RESOURCES = ['cpu', 'memory', 'ephemeral-storage', GPU_RESOURCE] as const;
type Amounts = Record<typeof RESOURCES[number], number>;

const BINARY_SUFFIX: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };
const DECIMAL_SUFFIX: Record<string, number> = { n: 1e-9, u: 1e-6, m: 1e-3, '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18 };
const QUANTITY = /^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$/;

/** A Kubernetes quantity (`7910m`, `31Gi`, `1e3`, `2`) as a number of its base unit. */
export function parseQuantity(quantity: string | number | undefined): number {
  if (quantity === undefined) return 0;
  if (typeof quantity === 'number') return quantity;
  const match = QUANTITY.exec(quantity.trim());
  if (!match) throw new Error(`unreadable Kubernetes quantity "${quantity}"`);
  const [, digits, exponent, suffix = ''] = match;
  return Number(digits) * (exponent ? 10 ** Number(exponent.slice(1)) : BINARY_SUFFIX[suffix] ?? DECIMAL_SUFFIX[suffix]!);
}

function amounts(source: Record<string, string | number> | undefined): Amounts {
  return Object.fromEntries(RESOURCES.map((resource) => [resource, parseQuantity(source?.[resource])])) as Amounts;
}

/** What a pod asks of its node: its containers together, or its largest init container if that is more, plus its overhead. */
function podRequests(pod: V1Pod): Amounts {
  const ofContainer = (container: { resources?: { requests?: Record<string, string>; limits?: Record<string, string> } }) =>
    amounts({ ...container.resources?.limits, ...container.resources?.requests });
  const overhead = amounts(pod.spec?.overhead);
  const containers = (pod.spec?.containers ?? []).map(ofContainer);
  const inits = (pod.spec?.initContainers ?? []).map(ofContainer);
  return Object.fromEntries(RESOURCES.map((resource) => {
    const together = containers.reduce((sum, container) => sum + container[resource], 0);
    return [resource, Math.max(together, ...inits.map((init) => init[resource])) + overhead[resource]];
  })) as Amounts;
}

function sum(all: Amounts[]): Amounts {
  return Object.fromEntries(RESOURCES.map((resource) => [resource, all.reduce((total, one) => total + one[resource], 0)])) as Amounts;
}

function minus(a: Amounts, b: Amounts): Amounts {
  return Object.fromEntries(RESOURCES.map((resource) => [resource, a[resource] - b[resource]])) as Amounts;
}

function isReady(node: V1Node): boolean {
  return !node.spec?.unschedulable && (node.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
}

/** Pods that hold what they request: bound to a node and not finished. */
export function holdsResources(pod: V1Pod): boolean {
  return Boolean(pod.spec?.nodeName) && pod.status?.phase !== 'Succeeded' && pod.status?.phase !== 'Failed';
}

/** The node and the number of GPUs an offer of this backend stands for. */
export function parseOfferId(offerId: string): { node: string; gpus: number } | null {
  const match = /^(.+)\/(?:(\d+)x.*|cpu)$/.exec(offerId);
  return match ? { node: match[1]!, gpus: match[2] ? Number(match[2]) : 0 } : null;
}

/**
 * The offers of one ready node. A GPU node offers 1 to N of its N GPUs, each with the same fraction of the CPU,
 * memory and ephemeral storage that its pods without GPUs leave; such an offer is available while that much is
 * not requested by the node's GPU pods. A node without GPUs offers what its pods leave, as one instance.
 * `pods` are the pods bound to this node.
 */
export function nodeOffers(node: V1Node, pods: V1Pod[], pricePerGpuHour: number): Offer[] {
  if (!isReady(node)) return [];
  const name = node.metadata!.name!;
  const labels = node.metadata?.labels ?? {};
  const region = labels[REGION_LABEL] ?? DEFAULT_REGION;
  const allocatable = amounts(node.status?.allocatable);
  const requests = pods.filter(holdsResources).map(podRequests);
  const gpus = Math.floor(allocatable[GPU_RESOURCE]);
  const toOffer = (offerId: string, gpu: Offer['gpu'], shape: Amounts, available: boolean): Offer => ({
    backend: 'kubernetes',
    offerId,
    gpu,
    cpus: Math.floor(shape.cpu),
    memoryMib: Math.floor(shape.memory / MIB),
    diskMib: Math.floor(shape['ephemeral-storage'] / MIB),
    region,
    pricePerHour: gpu.count * pricePerGpuHour,
    availability: available ? 'available' : 'unavailable',
  });
  if (gpus === 0) {
    const free = minus(allocatable, sum(requests));
    if (free.cpu < 1) return [];
    return [toOffer(`${name}/cpu`, { name: '', memoryMib: 0, count: 0 }, free, true)];
  }
  const base = minus(allocatable, sum(requests.filter((request) => request[GPU_RESOURCE] === 0)));
  const free = minus(base, sum(requests.filter((request) => request[GPU_RESOURCE] > 0)));
  const model = nodeGpuModel(labels);
  const offers: Offer[] = [];
  for (let count = 1; count <= gpus; count++) {
    const shape = Object.fromEntries(RESOURCES.map((resource) => [resource, (base[resource] * count) / gpus])) as Amounts;
    shape.cpu = Math.floor(shape.cpu);
    if (shape.cpu < 1) continue;
    const available = free[GPU_RESOURCE] >= count && RESOURCES.every((resource) => resource === GPU_RESOURCE || free[resource] >= shape[resource]);
    offers.push(toOffer(`${name}/${count}x${model.name}`, { name: model.name, memoryMib: model.memoryMib, count }, shape, available));
  }
  return offers;
}
