import type { GpuModel, GpucloudOffer } from './api.js';

/** What one GPU of a model brings to a machine; machines with n GPUs get n times each figure. */
interface PerGpuShape {
  memoryGb: number;
  vcpus: number;
  ramGb: number;
  diskGb: number;
  pricePerHour: number;
}

export const GPU_SHAPES: Record<GpuModel, PerGpuShape> = {
  L4: { memoryGb: 24, vcpus: 8, ramGb: 32, diskGb: 200, pricePerHour: 0.8 },
  H100: { memoryGb: 80, vcpus: 26, ramGb: 225, diskGb: 1000, pricePerHour: 2.5 },
  H200: { memoryGb: 141, vcpus: 28, ramGb: 250, diskGb: 1500, pricePerHour: 3.5 },
  RTXPRO6000: { memoryGb: 96, vcpus: 16, ramGb: 128, diskGb: 500, pricePerHour: 1.9 },
};

export const GPU_COUNTS = [1, 2, 4, 8] as const;
/** Instances per GPU model the emulator lets exist at once unless told otherwise. */
export const DEFAULT_CAPACITY_PER_MODEL = 8;
export const REGIONS = ['us-east-1', 'eu-west-1'] as const;
/** A spot machine's price as a share of the same machine on demand. */
export const SPOT_PRICE_FACTOR = 0.4;

export type CatalogOffer = Omit<GpucloudOffer, 'availability'> & { gpu: { model: GpuModel } };

/** Every machine shape the emulated cloud sells, on demand and, right after it, as spot, in a stable order. */
export function buildCatalog(): CatalogOffer[] {
  const offers: CatalogOffer[] = [];
  for (const region of REGIONS) {
    for (const model of Object.keys(GPU_SHAPES) as GpuModel[]) {
      const shape = GPU_SHAPES[model];
      for (const count of GPU_COUNTS) {
        const onDemand: CatalogOffer = {
          id: `${model.toLowerCase()}-x${count}-${region}`,
          gpu: { model, memory_gb: shape.memoryGb, count },
          vcpus: shape.vcpus * count,
          memory_gb: shape.ramGb * count,
          disk_gb: shape.diskGb * count,
          region,
          price_per_hour: Math.round(shape.pricePerHour * count * 100) / 100,
          spot: false,
        };
        offers.push(onDemand, {
          ...onDemand,
          gpu: { ...onDemand.gpu },
          id: `${onDemand.id}-spot`,
          price_per_hour: Math.round(shape.pricePerHour * count * SPOT_PRICE_FACTOR * 100) / 100,
          spot: true,
        });
      }
    }
  }
  return offers;
}

/** The `--gpu` argument of `orchestrator agent` for a machine of this offer, e.g. "H100:80GB:2". */
export function agentGpuSpec(offer: CatalogOffer): string {
  return `${offer.gpu.model}:${offer.gpu.memory_gb}GB:${offer.gpu.count}`;
}
