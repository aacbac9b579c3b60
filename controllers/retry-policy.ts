import { parseDuration } from '../api/duration.js';
import type { RunTerminationReason } from '../api/status.js';
import type { RunRecord } from '../store/runs.js';

export type RetryEvent = 'no-capacity' | 'interruption' | 'error';

const ALL_EVENTS: readonly RetryEvent[] = ['no-capacity', 'interruption', 'error'];
const DEFAULT_RETRY_SECONDS = 3600;

/** The `retry` event each way of failing counts as; reasons not listed (a refused job, a user's stop) are never retried. */
const EVENT_OF: Partial<Record<RunTerminationReason, RetryEvent>> = {
  no_offers: 'no-capacity',
  interrupted: 'interruption',
  failed_by_user_code: 'error',
  instance_unreachable: 'error',
  instance_terminated: 'error',
  provisioning_failed: 'error',
};

export interface RetryDecision {
  event: RetryEvent;
  /** When `retry.duration` since the first submission runs out. */
  until: Date;
}

/**
 * Whether a run that failed for `reason` is to be tried again under its `retry`: the reason is one of the
 * listed events and `retry.duration` since the first attempt's submission has not run out. Service replicas
 * are replaced by their service instead.
 */
export function retryDecision(run: Pick<RunRecord, 'spec' | 'replica' | 'firstSubmittedAt' | 'desired'>, reason: RunTerminationReason, now = Date.now()): RetryDecision | null {
  const retry = run.spec.retry as boolean | { on_events?: RetryEvent[]; duration?: string | number } | undefined;
  if (retry === undefined || retry === false || run.replica !== null || run.desired !== 'run') return null;
  const event = EVENT_OF[reason];
  if (!event) return null;
  const events = retry === true ? ALL_EVENTS : retry.on_events ?? ALL_EVENTS;
  if (!events.includes(event)) return null;
  const seconds = retry === true || retry.duration === undefined ? DEFAULT_RETRY_SECONDS : parseDuration(retry.duration);
  const until = new Date(run.firstSubmittedAt.getTime() + seconds * 1000);
  return now < until.getTime() ? { event, until } : null;
}
