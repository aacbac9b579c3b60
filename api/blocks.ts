import type { Offer } from './offer.js';
import type { FleetSpec } from './spec.js';

/** The blocks an instance with `gpus` GPUs of a fleet is split into: `auto` gives one per GPU (one for a machine without GPUs). */
export function blockCount(fleet: Pick<FleetSpec, 'blocks'>, gpus: number): number {
  const blocks = fleet.blocks ?? 1;
  return blocks === 'auto' ? Math.max(1, gpus) : blocks;
}

/** Whether the fleet's instances are shared between runs, block by block. */
export function isSplit(fleet: Pick<FleetSpec, 'blocks'>): boolean {
  return (fleet.blocks ?? 1) !== 1;
}

/**
 * What `taken` of an instance's `total` blocks give a run: that share of its GPUs, CPUs and memory (a remainder
 * that does not divide evenly is left unused); the disk is shared whole.
 */
export function blockShare(offer: Offer, total: number, taken: number): Offer {
  const share = (amount: number) => Math.floor(amount / total) * taken;
  return { ...offer, gpu: { ...offer.gpu, count: share(offer.gpu.count) }, cpus: Math.max(1, share(offer.cpus)), memoryMib: share(offer.memoryMib) };
}

/** The GPUs of blocks `indices` (numbered from 0) of an instance with `gpus` GPUs in `total` blocks. */
export function blockGpus(indices: readonly number[], gpus: number, total: number): number[] {
  const perBlock = Math.floor(gpus / total);
  return indices.flatMap((block) => Array.from({ length: perBlock }, (_, index) => block * perBlock + index));
}
