import type { AgentMetrics, JobStatus } from '../api/agent.js';

/** How often the agent measures its machine while a job is unfinished, and for how long it keeps the samples. */
export const HISTORY_INTERVAL_MS = 5000;
export const HISTORY_KEPT_MS = 60 * 60_000;

/**
 * The machine's samples of the last hour, taken in the background every five seconds while a job is pending or
 * running, in a ring of fixed size: memory does not grow with time or with the number of jobs. A job's history is the
 * part taken while it ran (the agent measures the machine, which its jobs share).
 */
export class MetricsHistory {
  private readonly ring: AgentMetrics[] = [];
  private next = 0;
  private timer: ReturnType<typeof setInterval> | undefined;
  private sampling = false;

  constructor(readonly capacity = Math.ceil(HISTORY_KEPT_MS / HISTORY_INTERVAL_MS)) {}

  record(sample: AgentMetrics): void {
    this.ring[this.next] = sample;
    this.next = (this.next + 1) % this.capacity;
  }

  /** Every sample kept, oldest first. */
  samples(): AgentMetrics[] {
    return [...this.ring.slice(this.next), ...this.ring.slice(0, this.next)];
  }

  /** The samples taken between the job's start and its end (or now), oldest first. */
  of(job: Pick<JobStatus, 'startedAt' | 'finishedAt'>): AgentMetrics[] {
    if (!job.startedAt) return [];
    const from = Date.parse(job.startedAt);
    const until = job.finishedAt ? Date.parse(job.finishedAt) : Number.POSITIVE_INFINITY;
    return this.samples().filter((sample) => { const at = Date.parse(sample.ts); return at >= from && at <= until; });
  }

  /** Takes a sample every `intervalMs` while `busy()` says a job needs one; a sample still being taken is not doubled. */
  start(sample: () => Promise<AgentMetrics>, busy: () => boolean, onError: (error: Error) => void, intervalMs = HISTORY_INTERVAL_MS): void {
    this.timer = setInterval(() => {
      if (this.sampling || !busy()) return;
      this.sampling = true;
      sample().then((taken) => this.record(taken), onError).finally(() => { this.sampling = false; });
    }, intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
