import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DECLARED_GPU_UTILIZATION_FILE, type AgentMetrics } from '../api/agent.js';
import type { GpuInfo } from '../api/offer.js';
import { gpuUsage } from './gpu.js';

interface CpuSample {
  busy: number;
  total: number;
  at: number;
}

/** Shortest interval over which a CPU percentage means something. */
const MIN_CPU_WINDOW_MS = 100;

async function sampleCpu(): Promise<CpuSample> {
  const stat = await readFile('/proc/stat', 'utf8');
  const fields = stat.split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = fields.reduce((sum, value) => sum + value, 0);
  const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
  return { busy: total - idle, total, at: Date.now() };
}

async function memoryMib(): Promise<{ used: number; total: number }> {
  const meminfo = await readFile('/proc/meminfo', 'utf8');
  const kib = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(meminfo)?.[1] ?? 0);
  const total = kib('MemTotal');
  return { used: Math.round((total - kib('MemAvailable')) / 1024), total: Math.round(total / 1024) };
}

/**
 * CPU and memory of this machine from /proc, GPUs from nvidia-smi. CPU use is measured since the
 * previous call (or over a short window when there was none recently).
 */
export class MetricsSampler {
  private previous: CpuSample | null = null;

  /**
   * `declaredGpu`: GPUs reported when nvidia-smi is absent, as on an emulated instance: idle, or as busy as
   * DECLARED_GPU_UTILIZATION_FILE in `workDir` says.
   */
  constructor(private readonly declaredGpu: GpuInfo, private readonly workDir: string) {}

  async sample(): Promise<AgentMetrics> {
    let before = this.previous;
    if (!before || Date.now() - before.at < MIN_CPU_WINDOW_MS) {
      before = await sampleCpu();
      await new Promise((resolve) => setTimeout(resolve, MIN_CPU_WINDOW_MS));
    }
    const [now, memory, gpus, declaredUtilization] = await Promise.all([sampleCpu(), memoryMib(), gpuUsage(), this.declaredUtilization()]);
    this.previous = now;
    const elapsed = now.total - before.total;
    return {
      ts: new Date().toISOString(),
      cpuPercent: elapsed > 0 ? Math.round(((now.busy - before.busy) / elapsed) * 1000) / 10 : 0,
      memoryUsedMib: memory.used,
      memoryTotalMib: memory.total,
      gpus: gpus ?? Array.from({ length: this.declaredGpu.count }, (_, index) => ({
        index,
        name: this.declaredGpu.name,
        utilizationPercent: declaredUtilization,
        memoryUsedMib: 0,
        memoryTotalMib: this.declaredGpu.memoryMib,
      })),
    };
  }

  private async declaredUtilization(): Promise<number> {
    const text = await readFile(join(this.workDir, DECLARED_GPU_UTILIZATION_FILE), 'utf8').catch(() => '');
    const percent = Number(text.trim());
    return text.trim() !== '' && Number.isFinite(percent) ? Math.min(100, Math.max(0, percent)) : 0;
  }
}
