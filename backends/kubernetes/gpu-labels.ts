import { canonicalGpuName, KNOWN_GPUS } from '../../api/gpu.js';
import { gpuModelName } from '../local/machine.js';

/** The extended resource NVIDIA's device plugin gives nodes, and the taint GPU node pools carry. */
export const GPU_RESOURCE = 'nvidia.com/gpu';

/**
 * Node labels that name the GPU model, most precise first: NVIDIA's GPU feature discovery (`NVIDIA-L4`,
 * `NVIDIA-A100-SXM4-80GB`), GKE (`nvidia-l4`, `nvidia-tesla-t4`, `nvidia-h100-80gb`), Karpenter on AWS (`l4`, `a10g`).
 */
export const GPU_MODEL_LABELS = ['nvidia.com/gpu.product', 'cloud.google.com/gke-accelerator', 'karpenter.k8s.aws/instance-gpu-name'] as const;

/** Node labels that give the memory of one GPU in MiB. */
const GPU_MEMORY_LABELS = ['nvidia.com/gpu.memory', 'karpenter.k8s.aws/instance-gpu-memory'];

export interface NodeGpuModel {
  /** The model as offers name it (`L4`, `A100`), or `unknown` for a node without a model label. */
  name: string;
  memoryMib: number;
  /** The label the model was read from and its value there, for the pods' node affinity; null without one. */
  label: { key: string; value: string } | null;
}

/** The model of a GPU node's cards, from whichever of the well-known labels it carries. */
export function nodeGpuModel(labels: Record<string, string>): NodeGpuModel {
  const key = GPU_MODEL_LABELS.find((candidate) => labels[candidate]);
  const memoryLabel = GPU_MEMORY_LABELS.map((candidate) => Number(labels[candidate])).find((mib) => Number.isInteger(mib) && mib > 0);
  if (!key) return { name: 'unknown', memoryMib: memoryLabel ?? 0, label: null };
  const value = labels[key]!;
  const label = { key, value };
  // A MIG slice (`NVIDIA-A100-SXM4-40GB-MIG-1g.5gb`) is not the whole card: it keeps its own name, and only a memory label says its size.
  if (/-MIG-/i.test(value)) return { name: gpuModelName(value), memoryMib: memoryLabel ?? 0, label };
  const name = knownModelIn(value) ?? (gpuModelName(value) || value);
  return { name, memoryMib: memoryLabel ?? memoryInLabel(value) ?? catalogueMemory(name), label };
}

/** The known model a label value names: the longest leading part of it that is one (`nvidia-h100-mega-80gb` → H100). */
function knownModelIn(value: string): string | null {
  const parts = value.split('-');
  for (let length = parts.length; length > 0; length--) {
    const known = knownName(gpuModelName(parts.slice(0, length).join('-')));
    if (known) return known;
  }
  return null;
}

function knownName(name: string): string | null {
  if (!name) return null;
  try {
    return canonicalGpuName(name);
  } catch {
    return null;
  }
}

/** `80GB` in `NVIDIA-A100-SXM4-80GB` or `nvidia-h100-80gb`. */
function memoryInLabel(value: string): number | null {
  const size = /(?:^|-)(\d+)gb(?:-|$)/i.exec(value);
  return size ? Number(size[1]) * 1024 : null;
}

/** The smallest memory the catalogue knows for the model; 0 for a model it does not know. */
function catalogueMemory(name: string): number {
  const sizes = KNOWN_GPUS.filter((gpu) => gpu.name === name).map((gpu) => gpu.memoryMib);
  return sizes.length > 0 ? Math.min(...sizes) : 0;
}
