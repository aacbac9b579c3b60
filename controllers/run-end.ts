import type { RunStatus, RunTerminationReason } from '../api/status.js';
import type { Db, Queryable } from '../store/db.js';
import { recordEvent, runEvent } from '../store/events.js';
import { insertRetryAttempt, writeRunStep, type RunRecord } from '../store/runs.js';
import { retryDecision } from './retry-policy.js';

export interface RunEnd {
  status: RunStatus;
  reason: RunTerminationReason;
  message: string;
  exitCode: number | null;
  /** When the run started, for one that ends without having been seen running (a multi-node task whose nodes all ended quickly). */
  startedAt?: Date;
  /** Gives the run's instance back (idle again, for the next run) in the same transaction. */
  releaseInstance?: boolean;
}

/**
 * Ends a run while `owner` holds its lease, with its event, and submits its next attempt where its `retry` asks for
 * one, all in one transaction; false when the lease was lost and nothing was written.
 */
export async function endRun(db: Db, owner: string, run: RunRecord, end: RunEnd): Promise<boolean> {
  const { status, reason, message, exitCode } = end;
  const retry = status === 'failed' ? retryDecision(run, reason) : null;
  const write = async (q: Queryable) => {
    const ended = await writeRunStep(q, run.id, owner, {
      status, termination_reason: reason, status_message: message, exit_code: exitCode, finished_at: new Date(),
      ...(end.startedAt && { started_at: end.startedAt }),
    }, runEvent(run, statusReason(status), `${reason}: ${message} (attempt ${run.attempt})`), { releaseInstance: end.releaseInstance ? run.instanceId : null });
    if (!ended || !retry) return ended;
    const next = await insertRetryAttempt(q, run, `attempt ${run.attempt + 1} after ${retry.event}; waiting to be scheduled`);
    if (next) {
      await recordEvent(q, runEvent(run, 'Retrying',
        `attempt ${run.attempt} failed (${reason}); attempt ${next.attempt} submitted, retry on ${retry.event} until ${retry.until.toISOString()}`));
    }
    return true;
  };
  // The end is one statement; a next attempt is written with it in one transaction.
  return retry ? db.transaction(write) : write(db);
}

/** `Running`, `Failed`...: a status as an event's reason. */
export function statusReason(status: RunStatus): string {
  return status.charAt(0).toUpperCase() + status.slice(1);
}
