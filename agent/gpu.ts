import { execFile } from 'node:child_process';
import type { AgentMetrics } from '../api/agent.js';
import type { GpuInfo } from '../api/offer.js';

export const NO_GPU: GpuInfo = { name: '', memoryMib: 0, count: 0 };

const MEMORY_UNITS_MIB: Record<string, number> = { MB: 1, MIB: 1, GB: 1024, GIB: 1024, TB: 1024 * 1024, TIB: 1024 * 1024 };

/**
 * Parses a GPU declaration `NAME[:MEMORY][:COUNT]`, e.g. `H100:80GB:2`, `A10G:24GB`, `L4:1`.
 * Memory takes MB/MiB/GB/GiB/TB/TiB (GB counted as GiB, as GPU makers do); the count defaults to 1.
 */
export function parseGpuSpec(spec: string): GpuInfo {
  const parts = spec.trim().split(':');
  const name = parts[0]!.trim();
  if (name.length === 0) throw new Error(`invalid GPU spec "${spec}": expected NAME[:MEMORY][:COUNT], e.g. H100:80GB:2`);
  let memoryMib: number | null = null;
  let count: number | null = null;
  for (const part of parts.slice(1)) {
    const memory = /^(\d+(?:\.\d+)?)\s*([A-Za-z]+)$/.exec(part.trim());
    if (memory) {
      const unit = MEMORY_UNITS_MIB[memory[2]!.toUpperCase()];
      if (unit === undefined || memoryMib !== null) throw new Error(`invalid GPU spec "${spec}": "${part}" is not a memory size like 80GB`);
      memoryMib = Math.round(Number(memory[1]) * unit);
    } else if (/^\d+$/.test(part.trim()) && count === null) {
      count = Number(part.trim());
    } else {
      throw new Error(`invalid GPU spec "${spec}": "${part}" is neither a memory size (80GB) nor a count (2)`);
    }
  }
  return { name, memoryMib: memoryMib ?? 0, count: count ?? 1 };
}

function nvidiaSmi(query: string): Promise<string[] | null> {
  return new Promise((resolve) => {
    execFile('nvidia-smi', [`--query-gpu=${query}`, '--format=csv,noheader,nounits'], { timeout: 10_000 }, (error, stdout) => {
      if (error) return resolve(null);
      resolve(stdout.split('\n').map((line) => line.trim()).filter((line) => line.length > 0));
    });
  });
}

function numberField(value: string | undefined): number {
  const parsed = Number(value);
  return Number.isFinite(parsed) ? parsed : 0;
}

/** The machine's NVIDIA GPUs as nvidia-smi lists them; NO_GPU where nvidia-smi is absent or fails. */
export async function detectGpus(): Promise<GpuInfo> {
  const lines = await nvidiaSmi('name,memory.total');
  if (!lines || lines.length === 0) return NO_GPU;
  const [name, memory] = lines[0]!.split(',').map((field) => field.trim());
  return { name: name ?? '', memoryMib: Math.round(numberField(memory)), count: lines.length };
}

/** Current use of each GPU from nvidia-smi; null where nvidia-smi is absent or fails. */
export async function gpuUsage(): Promise<AgentMetrics['gpus'] | null> {
  const lines = await nvidiaSmi('index,name,utilization.gpu,memory.used,memory.total');
  if (!lines) return null;
  return lines.map((line) => {
    const [index, name, utilization, used, total] = line.split(',').map((field) => field.trim());
    return {
      index: Math.round(numberField(index)),
      name: name ?? '',
      utilizationPercent: numberField(utilization),
      memoryUsedMib: numberField(used),
      memoryTotalMib: numberField(total),
    };
  });
}
