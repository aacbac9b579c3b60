import type { JobState } from '../api/agent.js';
import type { AgentClient } from '../agent/client.js';

/** How long an agent holds one call while none of its jobs changes state. */
const HOLD_MS = 25_000;
/** The wait before asking again after a call that failed (an agent unreachable, restarting). */
const RETRY_MS = 2000;
/** How long before an agent that refused the call (older than it) is asked again: it may have been upgraded. */
const UNSUPPORTED_RETRY_MS = 60_000;

/** A job that a look found, with the run it belongs to and the state it was in. */
export interface FollowedJob {
  runId: string;
  jobId: string;
  state: JobState;
}

interface Feed {
  agent: AgentClient;
  /** The jobs it follows, by job id, each with the state last seen and when a look last asked for it. */
  jobs: Map<string, { runId: string; state: JobState; lookedAt: number }>;
  /** The agent answered the last call: its jobs' changes arrive as they happen. */
  live: boolean;
  /** Until when an agent older than the call is not asked again. */
  unsupportedUntil: number;
  /** The call in flight; aborted to make it again with more jobs, or when the feeds close. */
  call: AbortController | null;
}

/**
 * One call held open per instance (`POST /api/jobs/changes`) that answers as soon as one of the jobs the watch looks at
 * there changes state; the watch then looks at those runs at once (`changed`). With a live feed, a running job needs a
 * look only every few seconds (for its logs, deadlines and lease), not every second to notice that it ended.
 */
export class JobChangeFeeds {
  private readonly feeds = new Map<string, Feed>();

  /** `forgetAfterMs`: a job no look asked for in this long is no longer followed. */
  constructor(private readonly changed: (runIds: string[]) => void, private readonly forgetAfterMs: number) {}

  /**
   * Follows the jobs a look found on an instance (with those that earlier looks there found); true when the instance's
   * feed is live, so that a change of their state will make their runs due without waiting for their next look.
   */
  follow(instanceId: string, agent: () => AgentClient, jobs: FollowedJob[]): boolean {
    if (jobs.length === 0) return this.feeds.get(instanceId)?.live ?? false;
    const now = Date.now();
    let feed = this.feeds.get(instanceId);
    const fresh = !feed;
    feed ??= { agent: agent(), jobs: new Map(), live: false, unsupportedUntil: 0, call: null };
    let added = false;
    for (const { runId, jobId, state } of jobs) {
      const known = feed.jobs.get(jobId);
      added ||= !known;
      feed.jobs.set(jobId, { runId, state, lookedAt: now });
    }
    if (fresh) {
      this.feeds.set(instanceId, feed);
      void this.run(instanceId, feed);
    } else if (added) {
      feed.call?.abort();
    }
    return feed.live;
  }

  /** Gives up every held call and forgets what it followed. */
  close(): void {
    const feeds = [...this.feeds.values()];
    this.feeds.clear();
    for (const feed of feeds) feed.call?.abort();
  }

  private async run(instanceId: string, feed: Feed): Promise<void> {
    while (this.feeds.get(instanceId) === feed) {
      const now = Date.now();
      for (const [jobId, job] of feed.jobs) if (now - job.lookedAt > this.forgetAfterMs) feed.jobs.delete(jobId);
      if (feed.jobs.size === 0) {
        this.feeds.delete(instanceId);
        return;
      }
      if (now < feed.unsupportedUntil) {
        await pause(feed.unsupportedUntil - now);
        continue;
      }
      const call = new AbortController();
      feed.call = call;
      try {
        // A feed not yet live asks without waiting first: the answer says at once that the agent follows its jobs.
        const answer = await feed.agent.jobChanges([...feed.jobs].map(([jobId, { state }]) => ({ jobId, state })), feed.live ? HOLD_MS : 0, call.signal);
        if (!answer) {
          feed.live = false;
          feed.unsupportedUntil = Date.now() + UNSUPPORTED_RETRY_MS;
          continue;
        }
        feed.live = true;
        const runIds: string[] = [];
        for (const { jobId, state } of answer.changed) {
          const job = feed.jobs.get(jobId);
          if (!job) continue;
          runIds.push(job.runId);
          if (state === null) feed.jobs.delete(jobId);
          else job.state = state;
        }
        if (runIds.length > 0) this.changed(runIds);
      } catch {
        // Aborted by us: made again with more jobs, or the feeds closed (then the loop ends).
        if (call.signal.aborted) continue;
        feed.live = false;
        await pause(RETRY_MS);
      } finally {
        feed.call = null;
      }
    }
  }
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}
