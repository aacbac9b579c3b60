import type { Logger } from 'winston';
import { LATENCY_BUCKETS_MS } from '../api/services.js';
import type { ServiceSecond } from '../store/service-stats.js';
import { coalesced } from './coalesce.js';

export const STATS_FLUSH_MS = 1000;

/** The histogram bucket of a latency: the first bound it does not exceed, or the last bucket for anything slower. */
export function latencyBucket(ms: number): number {
  const index = LATENCY_BUCKETS_MS.findIndex((bound) => ms <= bound);
  return index === -1 ? LATENCY_BUCKETS_MS.length : index;
}

const secondOf = (ms: number) => Math.floor(ms / 1000) * 1000;

/** One request's part in the statistics, from its arrival to its end. */
export interface CountedRequest {
  /** The answer's status arrived (or the gateway answered itself): records the latency, and an error for 5xx. */
  answered(status: number): void;
  /** The exchange failed after its answer had begun. */
  failed(): void;
  /** The request is over; later calls do nothing. */
  end(): void;
}

/** Where counted seconds go: the store under this server's name, or the server's API from a gateway process. Rejects when they did not. */
export type StatsSink = (seconds: ServiceSecond[]) => Promise<void>;

/**
 * Counts the requests of each service per second (requests, errors, most in flight, latency to the
 * answer's headers) and hands them to its sink about once a second.
 */
export class ServiceStatsRecorder {
  private seconds = new Map<string, ServiceSecond>();
  private readonly inflight = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  /** Writes the counted seconds; a failed write keeps its seconds for the next one. */
  readonly flush = coalesced(() => this.write());

  constructor(private readonly sink: StatsSink, private readonly logger: Logger) {}

  start(intervalMs = STATS_FLUSH_MS): void {
    this.timer = setInterval(() => void this.flush(), intervalMs);
  }

  /** Stops the timer and writes what is left. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  begin(runId: string): CountedRequest {
    const startedAt = Date.now();
    const now = this.inflight.get(runId) ?? 0;
    this.inflight.set(runId, now + 1);
    const second = this.second(runId, startedAt);
    second.requests++;
    second.inflight = Math.max(second.inflight, now + 1);
    let answered = false;
    let erred = false;
    let ended = false;
    const error = () => {
      if (erred) return;
      erred = true;
      this.second(runId, Date.now()).errors++;
    };
    return {
      answered: (status) => {
        if (answered || ended) return;
        answered = true;
        this.second(runId, Date.now()).latency[latencyBucket(Date.now() - startedAt)]!++;
        if (status >= 500) error();
      },
      failed: () => {
        if (!ended) error();
      },
      end: () => {
        if (ended) return;
        ended = true;
        const left = (this.inflight.get(runId) ?? 1) - 1;
        if (left > 0) this.inflight.set(runId, left);
        else this.inflight.delete(runId);
      },
    };
  }

  private async write(): Promise<void> {
    const now = Date.now();
    // A request that spans seconds is in flight in each of them, also in those where nothing else happened.
    for (const [runId, count] of this.inflight) {
      const second = this.second(runId, now);
      second.inflight = Math.max(second.inflight, count);
    }
    const batch = [...this.seconds.values()];
    this.seconds = new Map();
    try {
      if (batch.length > 0) await this.sink(batch);
    } catch (error) {
      this.logger.warn(`gateway: writing request statistics failed, keeping them for the next write: ${(error as Error).message}`);
      for (const second of batch) this.merge(second);
    }
  }

  private second(runId: string, at: number): ServiceSecond {
    const key = `${runId} ${secondOf(at)}`;
    let second = this.seconds.get(key);
    if (!second) {
      second = { runId, second: new Date(secondOf(at)), requests: 0, errors: 0, inflight: 0, latency: new Array(LATENCY_BUCKETS_MS.length + 1).fill(0) };
      this.seconds.set(key, second);
    }
    return second;
  }

  private merge(kept: ServiceSecond): void {
    const second = this.second(kept.runId, kept.second.getTime());
    second.requests += kept.requests;
    second.errors += kept.errors;
    second.inflight = Math.max(second.inflight, kept.inflight);
    kept.latency.forEach((count, i) => { second.latency[i]! += count; });
  }
}
