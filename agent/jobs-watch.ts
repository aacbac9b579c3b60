import type { JobStatus, JobsWatch, JobsWatchRequest } from '../api/agent.js';
import { MAX_LOG_PAGE_BYTES } from './jobs.js';
import type { StoredLogsPage } from './logs-page.js';

/** A job as `POST /api/jobs/watch` reports it: its status, and its entries after a given one within a byte budget. */
export interface WatchableJob {
  status: JobStatus;
  /** Entries after `after`, at most about `maxBytes` of them; none once the budget is spent. */
  page(after: number, maxBytes: number): StoredLogsPage;
}

/**
 * The answer of `POST /api/jobs/watch`: each asked job's status and its new entries, one page's bytes in all. The
 * jobs reached after the budget is spent say `more`, and the caller asks again from where it is. A job the agent does
 * not know has a null status, so one forgotten job never hides the others.
 */
export function jobsWatchAnswer(request: JobsWatchRequest, find: (jobId: string) => WatchableJob | undefined): JobsWatch {
  let budget = MAX_LOG_PAGE_BYTES;
  return {
    jobs: request.jobs.map(({ jobId, after }) => {
      const job = find(jobId);
      if (!job) return { jobId, status: null, log: { jsonLines: '', first: after + 1, next: after, finished: false, more: false } };
      const page = job.page(after, budget);
      budget -= page.jsonLines.length;
      return { jobId, status: job.status, log: { jsonLines: page.jsonLines, first: page.firstSeq, next: page.next, finished: page.finished, more: page.more } };
    }),
  };
}
