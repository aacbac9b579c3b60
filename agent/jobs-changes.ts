import type { JobsChanges, JobsChangesRequest, JobState } from '../api/agent.js';
import type { Waiters } from './waiters.js';

/**
 * The answer of `POST /api/jobs/changes`: as soon as one asked job is in another state than the caller last saw it in
 * (or the agent no longer has it), every such job; after `waitMs` without a change, none. `stateChanges` is woken
 * whenever one of the agent's jobs changes state.
 */
export async function jobsChangesAnswer(request: JobsChangesRequest, stateOf: (jobId: string) => JobState | undefined, stateChanges: Waiters): Promise<JobsChanges> {
  const deadline = Date.now() + request.waitMs;
  for (;;) {
    const changed = request.jobs.flatMap(({ jobId, state }) => {
      const now = stateOf(jobId) ?? null;
      return now === state ? [] : [{ jobId, state: now }];
    });
    const left = deadline - Date.now();
    if (changed.length > 0 || left <= 0) return { changed };
    await stateChanges.wait(left);
  }
}
