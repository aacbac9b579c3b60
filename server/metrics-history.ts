import type { AgentMetrics } from '../api/agent.js';

/** How far back a job's samples are kept, and for how many jobs at most (the least recently measured go first). */
const KEPT_MS = 10 * 60_000;
const KEPT_JOBS = 1000;

/**
 * The metrics samples this server took of each job (run, replica or node) in the last ten minutes, so that a page
 * opened again charts what was measured before it. Samples are taken when asked (a console page open on the run, the
 * CLI, the API), not in the background, and kept in memory: a restarted server starts again with none.
 */
export class MetricsHistory {
  private readonly jobs = new Map<string, AgentMetrics[]>();

  record(jobId: string, sample: AgentMetrics): void {
    const samples = this.recent(jobId);
    if (samples.at(-1)?.ts !== sample.ts) samples.push(sample);
    this.jobs.delete(jobId);
    this.jobs.set(jobId, samples);
    if (this.jobs.size > KEPT_JOBS) this.jobs.delete(this.jobs.keys().next().value!);
  }

  /** The job's samples of the last ten minutes, oldest first. */
  recent(jobId: string): AgentMetrics[] {
    const since = Date.now() - KEPT_MS;
    return (this.jobs.get(jobId) ?? []).filter((sample) => Date.parse(sample.ts) >= since);
  }
}
