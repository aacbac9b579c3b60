import type { Context } from 'koa';
import { LOG_LINES_HEADERS } from '../api/agent.js';
import { integerParam } from './requests.js';

/** Longest a logs request may wait for the first new entry. */
export const MAX_LOG_WAIT_MS = 30_000;

/** A page of a job's log as stored: JSON lines, the first entry's and the next page's sequence numbers, and whether more may come. */
export interface StoredLogsPage {
  jsonLines: string;
  firstSeq: number;
  next: number;
  finished: boolean;
  /** Whether entries after `next` exist already (the page was full). */
  more: boolean;
}

/** `after` and `wait` of `GET /api/jobs/:id/logs`, the wait capped at MAX_LOG_WAIT_MS. */
export function logsQuery(ctx: Context): { after: number; wait: number } {
  return {
    after: integerParam('after', ctx.query.after, 0),
    wait: Math.min(integerParam('wait', ctx.query.wait, 0), MAX_LOG_WAIT_MS),
  };
}

/** Answers with the page: JSON lines and headers with `format=jsonl`, else one JSON object. */
export function answerLogsPage(ctx: Context, page: StoredLogsPage): void {
  if (ctx.query.format === 'jsonl') {
    ctx.set(LOG_LINES_HEADERS.first, String(page.firstSeq));
    ctx.set(LOG_LINES_HEADERS.next, String(page.next));
    ctx.set(LOG_LINES_HEADERS.finished, String(page.finished));
    ctx.type = 'application/x-ndjson';
    ctx.body = page.jsonLines;
    return;
  }
  ctx.type = 'application/json';
  ctx.body = `{"entries":[${page.jsonLines.replaceAll('\n', ',')}],"next":${page.next},"finished":${page.finished}}`;
}
