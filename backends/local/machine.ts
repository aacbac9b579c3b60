import { execFile } from 'node:child_process';
import { statfs } from 'node:fs/promises';
import { cpus, totalmem } from 'node:os';
import { promisify } from 'node:util';
import type { GpuInfo } from '../../api/offer.js';

const MIB = 1024 * 1024;
const NVIDIA_SMI_TIMEOUT_MS = 5_000;
const NO_GPU: GpuInfo = { name: '', memoryMib: 0, count: 0 };
/** Words of marketing names that say nothing about the model: sizes, memory kinds, form factors. */
const NOISE_WORD = /^(NVIDIA|GEFORCE|TESLA|\d+GB|HBM\d*E?|PCIE|SXM\d*|NVL|BLACKWELL|SERVER|WORKSTATION|EDITION|GENERATION)$/;

export interface MachineShape {
  gpu: GpuInfo;
  cpus: number;
  memoryMib: number;
  diskMib: number;
}

/** This machine's GPUs, CPUs, memory and the disk space free under `dir`. */
export async function describeMachine(dir: string): Promise<MachineShape> {
  const disk = await statfs(dir);
  return {
    gpu: await detectGpus(),
    cpus: Math.max(1, cpus().length),
    memoryMib: Math.floor(totalmem() / MIB),
    diskMib: Math.floor((disk.bavail * disk.bsize) / MIB),
  };
}

/** GPUs as nvidia-smi reports them; none where nvidia-smi is missing or fails. */
export async function detectGpus(): Promise<GpuInfo> {
  try {
    const { stdout } = await promisify(execFile)('nvidia-smi',
      ['--query-gpu=name,memory.total', '--format=csv,noheader,nounits'], { timeout: NVIDIA_SMI_TIMEOUT_MS });
    return parseNvidiaSmiGpus(stdout);
  } catch {
    return NO_GPU;
  }
}

/** Reads `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits`: model of the first card, all cards counted, the smallest memory. */
export function parseNvidiaSmiGpus(csv: string): GpuInfo {
  const cards = csv.split('\n').map((line) => line.trim()).filter(Boolean).map((line) => {
    const comma = line.lastIndexOf(',');
    return { name: line.slice(0, comma).trim(), memoryMib: Number(line.slice(comma + 1).trim()) };
  }).filter((card) => card.name && Number.isFinite(card.memoryMib));
  if (cards.length === 0) return NO_GPU;
  return {
    name: gpuModelName(cards[0]!.name),
    memoryMib: Math.min(...cards.map((card) => Math.floor(card.memoryMib))),
    count: cards.length,
  };
}

/** "NVIDIA H100 80GB HBM3" → "H100", "NVIDIA RTX PRO 6000 Blackwell Server Edition" → "RTXPRO6000": the names offers use. */
export function gpuModelName(marketingName: string): string {
  const words = marketingName.toUpperCase().split(/[\s-]+/).filter((word) => word && !NOISE_WORD.test(word));
  return words.join('');
}
