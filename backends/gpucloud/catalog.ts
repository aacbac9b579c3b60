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

/** The model name of machines without GPUs; they have their own capacity. */
export const NO_GPU_MODEL = 'none';
/** A machine without GPUs, sold only when asked for (`cpuOffers`), for gateways and other small services. */
const CPU_SHAPE = { vcpus: 2, ramGb: 4, diskGb: 20, pricePerHour: 0.05 };

export type CatalogOffer = Omit<GpucloudOffer, 'availability'> & { gpu: { model: GpuModel | typeof NO_GPU_MODEL } };

/** Every machine shape the emulated cloud sells, on demand and, right after it, as spot, in a stable order; with `cpu`, a machine without GPUs per region first. */
export function buildCatalog(options: { cpu?: boolean } = {}): CatalogOffer[] {
  const offers: CatalogOffer[] = [];
  if (options.cpu) {
    for (const region of REGIONS) {
      offers.push({
        id: `cpu-x0-${region}`, gpu: { model: NO_GPU_MODEL, memory_gb: 0, count: 0 }, vcpus: CPU_SHAPE.vcpus,
        memory_gb: CPU_SHAPE.ramGb, disk_gb: CPU_SHAPE.diskGb, region, price_per_hour: CPU_SHAPE.pricePerHour, spot: false,
      });
    }
  }
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

/** The `--gpu` argument of `orchestrator agent` for a machine of this offer, e.g. "H100:80GB:2"; none for a machine without GPUs. */
export function agentGpuSpec(offer: CatalogOffer): string | undefined {
  if (offer.gpu.count === 0) return undefined;
  return `${offer.gpu.model}:${offer.gpu.memory_gb}GB:${offer.gpu.count}`;
}
