import { mkdirSync, rmSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'winston';
import type { JobState, JobStatus, JobSubmission } from '../api/agent.js';
import { DEFAULT_MAX_LOG_BYTES, JobLog, type RawEntries } from './job-log.js';
import type { StopRequest } from './requests.js';
import { JobStartError, type JobExecution, type JobRuntime } from './runtime.js';
import { Waiters } from './waiters.js';

export const DEFAULT_GRACE_SECONDS = 10;
/** Most entries one logs page carries; the caller continues from `next`. */
export const MAX_LOG_PAGE = 20_000;
/** Bytes of entries one logs page carries at most (long lines fill it before the count does). */
export const MAX_LOG_PAGE_BYTES = 4 * 1024 * 1024;

const FINAL_STATES: readonly JobState[] = ['exited', 'failed', 'stopped'];

interface Job {
  status: JobStatus;
  log: JobLog;
  dir: string;
  execution: JobExecution | null;
  stopRequested: boolean;
  killTimer: NodeJS.Timeout | null;
}

export interface RawLogsPage extends RawEntries {
  next: number;
  finished: boolean;
  more: boolean;
}

export type RemoveOutcome = 'removed' | 'unknown' | 'running';

/** The jobs of this agent: their lifecycle on a runtime, their logs and their stop. */
export class JobManager {
  private readonly jobs = new Map<string, Job>();
  private closing = false;
  /** Woken whenever a job changes state or is removed (`POST /api/jobs/changes` waits on it). */
  readonly stateChanges = new Waiters();

  constructor(
    private readonly runtime: JobRuntime,
    private readonly workDir: string,
    private readonly logger: Logger,
    private readonly maxLogBytes = DEFAULT_MAX_LOG_BYTES,
  ) {}

  /** Takes over the jobs a previous agent left running (containers found by their labels). */
  async recover(): Promise<void> {
    const recovered = await this.runtime.recover((jobId) => this.track(jobId).log);
    for (const { jobId, execution } of recovered) this.attach(this.jobs.get(jobId)!, execution);
  }

  ids(): string[] {
    return [...this.jobs.keys()];
  }

  /** Whether a job is pending, pulling or running. */
  hasUnfinishedJobs(): boolean {
    return [...this.jobs.values()].some((job) => !FINAL_STATES.includes(job.status.state));
  }

  status(jobId: string): JobStatus | undefined {
    const job = this.jobs.get(jobId);
    return job ? { ...job.status } : undefined;
  }

  /** Starts a job; a jobId already known starts nothing and returns that job's status. */
  submit(submission: JobSubmission): { created: boolean; status: JobStatus } {
    const existing = this.jobs.get(submission.jobId);
    if (existing) return { created: false, status: { ...existing.status } };
    const job = this.track(submission.jobId);
    this.logger.info('job submitted', { jobId: submission.jobId, runName: submission.runName, image: submission.image });
    void this.launch(job, submission);
    return { created: true, status: { ...job.status } };
  }

  /**
   * Entries after `after` as stored (JSON lines, never parsed here); waits up to `waitMs` for the
   * first one while the job may still print. `next` is where the following page starts.
   */
  async logs(jobId: string, after: number, waitMs: number): Promise<RawLogsPage | undefined> {
    const job = this.jobs.get(jobId);
    if (!job) return undefined;
    await job.log.waitForEntries(after, waitMs);
    return pageOf(job, after, MAX_LOG_PAGE_BYTES);
  }

  /** As `logs` without waiting, at most about `maxBytes` of entries (none at 0). */
  page(jobId: string, after: number, maxBytes: number): RawLogsPage | undefined {
    const job = this.jobs.get(jobId);
    return job && pageOf(job, after, maxBytes);
  }

  /** SIGTERM, then SIGKILL after the grace period; `abort` kills at once. Stopping a finished job changes nothing. */
  stop(jobId: string, options: StopRequest): JobStatus | undefined {
    const job = this.jobs.get(jobId);
    if (!job) return undefined;
    if (FINAL_STATES.includes(job.status.state)) return { ...job.status };
    job.stopRequested = true;
    const execution = job.execution;
    if (!execution) {
      this.logger.info('job stopped before it started', { jobId });
      this.finish(job, 'stopped', null);
      return { ...job.status };
    }
    this.logger.info('stopping job', { jobId, abort: options.abort ?? false, graceSeconds: options.graceSeconds ?? DEFAULT_GRACE_SECONDS });
    if (options.abort) {
      this.kill(job, execution, 'SIGKILL');
    } else {
      this.kill(job, execution, 'SIGTERM');
      if (job.killTimer === null) {
        job.killTimer = setTimeout(() => this.kill(job, execution, 'SIGKILL'), (options.graceSeconds ?? DEFAULT_GRACE_SECONDS) * 1000);
      }
    }
    return { ...job.status };
  }

  /** Forgets a finished job and removes its container and files. */
  async remove(jobId: string): Promise<RemoveOutcome> {
    const job = this.jobs.get(jobId);
    if (!job) return 'unknown';
    if (!FINAL_STATES.includes(job.status.state)) return 'running';
    this.jobs.delete(jobId);
    this.stateChanges.wakeAll();
    job.log.dispose();
    await this.runtime.remove(jobId);
    await rm(job.dir, { recursive: true, force: true });
    this.logger.info('job removed', { jobId });
    return 'removed';
  }

  /** Stops following jobs and answers pending log waits; see JobRuntime.shutdown for what keeps running. */
  async close(): Promise<void> {
    this.closing = true;
    for (const job of this.jobs.values()) if (job.killTimer) clearTimeout(job.killTimer);
    await this.runtime.shutdown();
    for (const job of this.jobs.values()) job.log.dispose();
  }

  private track(jobId: string): Job {
    const dir = join(this.workDir, 'jobs', jobId);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const job: Job = {
      status: { jobId, state: 'pending', exitCode: null, startedAt: null, finishedAt: null },
      log: new JobLog(join(dir, 'log.jsonl'), this.maxLogBytes),
      dir,
      execution: null,
      stopRequested: false,
      killTimer: null,
    };
    this.jobs.set(jobId, job);
    return job;
  }

  private async launch(job: Job, submission: JobSubmission): Promise<void> {
    let execution: JobExecution;
    try {
      execution = await this.runtime.start({
        submission,
        dir: job.dir,
        log: job.log,
        pulling: () => {
          if (job.status.state !== 'pending') return;
          job.status.state = 'pulling';
          this.stateChanges.wakeAll();
        },
        cancelled: () => job.stopRequested || this.closing,
      });
    } catch (error) {
      if (job.stopRequested || this.closing) return;
      const reason = error instanceof JobStartError ? error.message : `could not start: ${(error as Error).message}`;
      this.logger.warn('job failed to start', { jobId: job.status.jobId, reason });
      this.finish(job, 'failed', null, reason);
      return;
    }
    if (job.stopRequested || this.closing) {
      await execution.kill('SIGKILL').catch(() => undefined);
      return;
    }
    this.attach(job, execution);
  }

  private attach(job: Job, execution: JobExecution): void {
    job.execution = execution;
    job.status.state = 'running';
    job.status.startedAt = execution.startedAt;
    this.stateChanges.wakeAll();
    this.logger.info('job running', { jobId: job.status.jobId });
    execution.exited.then(
      ({ exitCode, finishedAt }) => {
        if (this.closing) return;
        this.finish(job, job.stopRequested ? 'stopped' : 'exited', exitCode, undefined, finishedAt);
      },
      (error: unknown) => {
        if (this.closing) return;
        this.finish(job, 'failed', null, `lost track of the job: ${(error as Error).message}`);
      },
    );
  }

  private kill(job: Job, execution: JobExecution, signal: 'SIGTERM' | 'SIGKILL'): void {
    execution.kill(signal).catch((error: unknown) => {
      this.logger.error('could not signal job', { jobId: job.status.jobId, signal, error: (error as Error).message });
    });
  }

  private finish(job: Job, state: JobState, exitCode: number | null, reason?: string, finishedAt = new Date().toISOString()): void {
    if (job.killTimer) clearTimeout(job.killTimer);
    job.killTimer = null;
    job.execution = null;
    job.status = { ...job.status, state, exitCode, finishedAt, ...(reason === undefined ? {} : { reason }) };
    job.log.close();
    this.stateChanges.wakeAll();
    this.logger.info('job finished', { jobId: job.status.jobId, state, exitCode, reason });
  }
}

function pageOf(job: Job, after: number, maxBytes: number): RawLogsPage {
  const entries = job.log.readRaw(after, maxBytes > 0 ? MAX_LOG_PAGE : 0, maxBytes);
  const next = entries.count > 0 ? entries.lastSeq : Math.max(after, Math.min(job.log.lastSeq, job.log.firstSeq - 1));
  return { ...entries, next, finished: job.log.closed && next >= job.log.lastSeq, more: next < job.log.lastSeq };
}
