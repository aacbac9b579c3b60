import type { Offer } from './offer.js';
import type { FleetSpec } from './spec.js';
import { sshHosts } from './ssh-fleet.js';

type BlockSettings = Pick<FleetSpec, 'blocks' | 'ssh_config'>;

/** An instance's blocks setting: its SSH host's own (`ssh_config.hosts[].blocks`), else the fleet's, as in dstack. */
function blocksSetting(fleet: BlockSettings, host: string | null): number | 'auto' {
  const index = host === null || !fleet.ssh_config ? -1 : sshHosts(fleet.ssh_config).findIndex((h) => h.name === host);
  const entry = index < 0 ? undefined : fleet.ssh_config!.hosts[index];
  return (typeof entry === 'object' ? entry.blocks : undefined) ?? fleet.blocks ?? 1;
}

/**
 * The blocks an instance with `gpus` GPUs of a fleet is split into (`host`: the SSH host it is, if any): `auto`
 * gives one per GPU (one for a machine without GPUs).
 */
export function blockCount(fleet: BlockSettings, gpus: number, host: string | null = null): number {
  const blocks = blocksSetting(fleet, host);
  return blocks === 'auto' ? Math.max(1, gpus) : blocks;
}

/** Whether the fleet's instances are shared between runs, block by block: the fleet or one of its SSH hosts says so. */
export function isSplit(fleet: BlockSettings): boolean {
  return (fleet.blocks ?? 1) !== 1 || (fleet.ssh_config?.hosts ?? []).some((h) => typeof h === 'object' && (h.blocks ?? 1) !== 1);
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
