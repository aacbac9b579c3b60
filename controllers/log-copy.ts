import type { AgentClient } from '../agent/client.js';
import type { Queryable } from '../store/db.js';
import { recordEvent } from '../store/events.js';
import { appendLogChunk, lastLogSeq } from '../store/logs.js';
import type { RunRecord } from '../store/runs.js';

export interface LogCopy {
  /** Lines copied into the database. */
  copied: number;
  /** False when the budget ran out while the agent still had lines. */
  caughtUp: boolean;
  /** The last line the database holds, as far as this copy saw. */
  lastSeq: number;
}

export interface LogCopyLimits {
  /** Bytes of log text the run keeps at most. */
  maxBytes: number;
  /** Stop asking for more pages once this long has passed (at least one page is always copied). */
  budgetMs: number;
  /** How long the agent may hold the first request until a line exists. */
  waitMs?: number;
  /**
   * The last line the database held after this copier's previous copy, which saves reading it; a hint only: had another
   * copier stored more since, the first write is refused and the database is asked.
   */
  after?: number;
}

/**
 * Copies the lines a job's agent has that the database lacks, page by page, within a time budget,
 * so that a job printing without pause never keeps its caller from anything else. Pages travel as
 * the agent stores them, never parsed here, and the next page is on its way while one is written.
 * A page another copier stored first is skipped by asking again from the last stored line. The
 * first loss of lines (over the run's limit, or rotated away at the agent) is written as an event.
 */
export async function copyJobLogs(db: Queryable, agent: AgentClient, run: RunRecord, limits: LogCopyLimits): Promise<LogCopy> {
  const deadline = Date.now() + limits.budgetMs;
  const fetchAfter = (after: number, waitMs = 0) => agent.logLines(run.jobId!, after, waitMs).catch(() => null);
  let copied = 0;
  let after = limits.after ?? await lastLogSeq(db, run.id);
  let fetching = fetchAfter(after, limits.waitMs);
  for (;;) {
    const page = await fetching;
    if (!page || page.count === 0) return { copied, caughtUp: true, lastSeq: after };
    const more = Date.now() < deadline;
    if (more) fetching = fetchAfter(page.next);
    const outcome = await appendLogChunk(db, run.id, { after, first: page.first, last: page.next, jsonLines: page.jsonLines }, limits.maxBytes);
    if (!outcome.stored) {
      after = await lastLogSeq(db, run.id);
      if (!more) return { copied, caughtUp: false, lastSeq: after };
      fetching = fetchAfter(after);
      continue;
    }
    after = page.next;
    if (outcome.firstLoss) await recordLogsTruncated(db, run, outcome.droppedLines, limits.maxBytes);
    copied += page.count;
    if (!more) return { copied, caughtUp: false, lastSeq: after };
  }
}

/** The event of a run's first lost lines. */
export async function recordLogsTruncated(db: Queryable, run: RunRecord, droppedLines: number, maxBytes: number): Promise<void> {
  await recordEvent(db, {
    projectId: run.projectId, objectKind: 'run', objectId: run.id, objectName: run.name, reason: 'LogsTruncated',
    message: `${droppedLines} of the oldest log lines were dropped: a run keeps at most ${Math.round(maxBytes / 1024 / 1024)} MB of logs (logs.max_size_per_run in the server's config.yml)`,
  });
}
