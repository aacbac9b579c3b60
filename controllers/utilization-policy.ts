import type { AgentClient } from '../agent/client.js';
import { parseDuration } from '../api/duration.js';
import type { Queryable } from '../store/db.js';
import { updateRun, type RunRecord } from '../store/runs.js';

/** Samples per time_window: enough that a short burst of work is seen, few enough that a long window costs little. */
const SAMPLES_PER_WINDOW = 5;
const MIN_SAMPLE_INTERVAL_MS = 1000;
const MAX_SAMPLE_INTERVAL_MS = 30_000;

interface UtilizationPolicy {
  min_gpu_utilization: number;
  time_window: string | number;
}

/**
 * Carries out `utilization_policy`: samples a running job's GPUs through its agent and keeps, with the run,
 * since when every GPU has stayed below the minimum; one GPU at or above it clears that. A run with no GPUs is
 * never stopped. When each run was last sampled is a hint kept in memory; a restarted server samples at once.
 */
export class UtilizationWatch {
  private readonly sampledAt = new Map<string, number>();

  /** Whether every GPU of the run has now stayed below the minimum for the whole window. */
  async underused(db: Queryable, owner: string, run: RunRecord, agent: AgentClient, now = Date.now()): Promise<boolean> {
    const policy = run.spec.utilization_policy as UtilizationPolicy | undefined;
    if (!policy) return false;
    const windowMs = parseDuration(policy.time_window) * 1000;
    const interval = Math.min(MAX_SAMPLE_INTERVAL_MS, Math.max(MIN_SAMPLE_INTERVAL_MS, windowMs / SAMPLES_PER_WINDOW));
    if (now - (this.sampledAt.get(run.id) ?? 0) < interval) return since(run, windowMs, now);
    this.sampledAt.set(run.id, now);
    const metrics = await agent.metrics().catch(() => null);
    if (!metrics) return since(run, windowMs, now);
    const low = metrics.gpus.length > 0 && metrics.gpus.every((gpu) => gpu.utilizationPercent < policy.min_gpu_utilization);
    const underusedSince = low ? run.gpuUnderusedSince ?? new Date(now) : null;
    if (underusedSince?.getTime() !== run.gpuUnderusedSince?.getTime()) {
      await updateRun(db, run.id, owner, { gpu_underused_since: underusedSince });
      run.gpuUnderusedSince = underusedSince;
    }
    return since(run, windowMs, now);
  }

  forget(runId: string): void {
    this.sampledAt.delete(runId);
  }
}

function since(run: RunRecord, windowMs: number, now: number): boolean {
  return run.gpuUnderusedSince !== null && now - run.gpuUnderusedSince.getTime() >= windowMs;
}
