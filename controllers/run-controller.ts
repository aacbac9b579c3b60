import type { Logger } from 'winston';
import type { JobStatus, JobSubmission } from '../api/agent.js';
import { parseDurationOrOff } from '../api/duration.js';
import type { RunStatus, RunTerminationReason } from '../api/status.js';
import { AgentClient, AgentError, AgentUnreachableError } from '../agent/client.js';
import type { Db, Row } from '../store/db.js';
import { recordEvent } from '../store/events.js';
import { getInstance, releaseInstanceFromRun, type InstanceRecord } from '../store/instances.js';
import { toRun, updateRun, type RunRecord } from '../store/runs.js';
import { LeasedController } from './leased.js';
import { copyJobLogs } from './log-copy.js';
import { CHANNELS } from './manager.js';

const RUNNING_POLL_MS = 1000;
const REQUEUE_BACKOFF_MS = 5000;
/** How often a quiet job's agent is asked for new lines; a job that printed since is asked at every look. */
const QUIET_LOG_COPY_INTERVAL_MS = 2000;
/** The longest one look at a run spends copying its lines; the rest waits for the next look, at once. */
const LOG_COPY_BUDGET_MS = 250;

/**
 * Follows each placed run: submits its job to the instance's agent, copies its logs, and ends it.
 * Two loops share this code: one starts placed runs, one watches running ones, so that starting a
 * run never waits behind a pass over thousands of running jobs.
 */
export class RunController extends LeasedController<RunRecord> {
  readonly name: string;
  /** When each run's lines were last copied and whether that copy found any; hints kept in memory. */
  private readonly lastLogCopy = new Map<string, { at: number; printing: boolean }>();

  constructor(db: Db, owner: string, logger: Logger, phase: 'start' | 'watch', private readonly maxLogBytes: number) {
    super(db, owner, logger, {
      table: 'runs', channel: CHANNELS.runs, leaseMs: 15_000,
      where: phase === 'start' ? `status = 'provisioning'` : `status IN ('running', 'terminating')`,
    });
    this.name = `run-${phase}`;
  }

  protected toRecord(row: Row): RunRecord {
    return toRun(row);
  }

  protected async reconcile(run: RunRecord): Promise<number> {
    const instance = run.instanceId ? await getInstance(this.db, run.instanceId) : null;
    if (run.status === 'provisioning') return this.provisioning(run, instance);
    if (!instance || instance.status === 'terminated' || instance.status === 'terminating') {
      await this.copyAllLogs(run, instance);
      await this.finish(run, instance, 'failed', 'instance_unreachable', `instance ${instance?.name ?? ''} is gone (${instance?.terminationReason ?? 'unknown'})`, null);
      return RUNNING_POLL_MS;
    }
    const agent = agentOf(instance);
    let job: JobStatus;
    try {
      job = await agent.job(run.jobId!);
    } catch (error) {
      if (error instanceof AgentUnreachableError) return RUNNING_POLL_MS;
      throw error;
    }
    const finished = isFinished(job);
    if (!finished && run.status === 'running' && run.desired !== 'run') {
      await agent.stop(run.jobId!, { abort: run.desired === 'abort' });
      await this.transition(run, 'terminating', run.desired === 'abort' ? 'aborting' : 'stopping');
      return 100;
    }
    const maxSeconds = maxDurationSeconds(run);
    if (!finished && run.status === 'running' && maxSeconds !== null && run.startedAt && Date.now() - run.startedAt.getTime() > maxSeconds * 1000) {
      await agent.stop(run.jobId!, {});
      await this.transition(run, 'terminating', `max_duration of ${maxSeconds}s exceeded`);
      return 100;
    }
    if (finished || this.logsDue(run.id)) {
      const { copied, caughtUp } = await copyJobLogs(this.db, agent, run, { maxBytes: this.maxLogBytes, budgetMs: LOG_COPY_BUDGET_MS });
      this.lastLogCopy.set(run.id, { at: Date.now(), printing: copied > 0 });
      if (!caughtUp) return 0;
    }
    if (finished) {
      await this.finishJob(run, instance, job);
      return RUNNING_POLL_MS;
    }
    return run.status === 'terminating' ? 250 : pollDelay(run);
  }

  private async provisioning(run: RunRecord, instance: InstanceRecord | null): Promise<number> {
    if (run.desired !== 'run') {
      if (instance) await releaseInstanceFromRun(this.db, instance.id, run.id);
      await this.finish(run, null, 'terminated', run.desired === 'abort' ? 'aborted_by_user' : 'stopped_by_user', 'stopped before its job started', null);
      return RUNNING_POLL_MS;
    }
    if (!instance || instance.status === 'terminated' || instance.status === 'terminating') {
      await this.requeue(run, `instance ${instance?.name ?? ''} could not be used (${instance?.statusMessage || instance?.terminationReason || 'gone'}); back in the queue`);
      return RUNNING_POLL_MS;
    }
    if (instance.status !== 'busy' || !instance.agentUrl) return RUNNING_POLL_MS;
    const submission = jobFor(run, instance);
    let job: JobStatus;
    try {
      job = await agentOf(instance).submit(submission);
    } catch (error) {
      if (error instanceof AgentError && error.status >= 400 && error.status < 500) {
        await releaseInstanceFromRun(this.db, instance.id, run.id);
        await this.finish(run, null, 'failed', 'submit_failed', `the instance refused the job: ${error.message}`, null);
        return RUNNING_POLL_MS;
      }
      throw error;
    }
    run.jobId = submission.jobId;
    if (isFinished(job)) {
      if (!(await updateRun(this.db, run.id, this.owner, { job_id: submission.jobId }))) return RUNNING_POLL_MS;
      await this.copyAllLogs(run, instance);
      await this.finishJob(run, instance, job);
      return RUNNING_POLL_MS;
    }
    await this.transition(run, 'running', `running on ${instance.name}`, { job_id: submission.jobId, started_at: new Date() });
    return 100;
  }

  private async finishJob(run: RunRecord, instance: InstanceRecord, job: JobStatus): Promise<void> {
    if (run.status === 'terminating' || job.state === 'stopped') {
      const reason: RunTerminationReason = run.desired === 'abort' ? 'aborted_by_user' : run.desired === 'stop' ? 'stopped_by_user' : 'max_duration_exceeded';
      await this.finish(run, instance, 'terminated', reason, `stopped (${reason.replaceAll('_', ' ')})`, job.exitCode);
    } else if (job.state === 'exited' && job.exitCode === 0) {
      await this.finish(run, instance, 'done', 'done_by_user_code', 'exited with code 0', 0);
    } else if (job.state === 'exited') {
      await this.finish(run, instance, 'failed', 'failed_by_user_code', `exited with code ${job.exitCode}`, job.exitCode);
    } else {
      await this.finish(run, instance, 'failed', 'submit_failed', job.reason ?? 'the job could not start', job.exitCode);
    }
  }

  private async finish(run: RunRecord, instance: InstanceRecord | null, status: RunStatus, reason: RunTerminationReason, message: string, exitCode: number | null): Promise<void> {
    const written = await updateRun(this.db, run.id, this.owner, {
      status, termination_reason: reason, status_message: message, exit_code: exitCode, finished_at: new Date(),
    });
    if (!written) return;
    this.lastLogCopy.delete(run.id);
    await recordEvent(this.db, { projectId: run.projectId, objectKind: 'run', objectId: run.id, objectName: run.name, reason: statusReason(status), message: `${reason}: ${message}` });
    if (instance && run.jobId && instance.status !== 'terminated') {
      await agentOf(instance).remove(run.jobId).catch(() => {});
    }
    if (run.instanceId) await releaseInstanceFromRun(this.db, run.instanceId, run.id);
    await this.db.notify(CHANNELS.runs);
  }

  private async requeue(run: RunRecord, message: string): Promise<void> {
    const rows = await this.db.query(
      `UPDATE runs SET status = 'submitted', status_message = $3, instance_id = NULL, fleet_id = NULL,
         next_reconcile_at = now() + $4 * interval '1 millisecond', updated_at = now()
       WHERE id = $1 AND lease_owner = $2 RETURNING id`, [run.id, this.owner, message, REQUEUE_BACKOFF_MS]);
    if (rows.length === 0) return;
    await recordEvent(this.db, { projectId: run.projectId, objectKind: 'run', objectId: run.id, objectName: run.name, reason: 'Requeued', message });
  }

  private async transition(run: RunRecord, status: RunStatus, message: string, extra: Record<string, unknown> = {}): Promise<void> {
    if (!(await updateRun(this.db, run.id, this.owner, { status, status_message: message, ...extra }))) return;
    run.status = status;
    await recordEvent(this.db, { projectId: run.projectId, objectKind: 'run', objectId: run.id, objectName: run.name, reason: statusReason(status), message });
    await this.db.notify(CHANNELS.runs);
  }

  /** Whether a running job's lines are due to be copied again; a restarted server copies at once. */
  private logsDue(runId: string): boolean {
    const last = this.lastLogCopy.get(runId);
    return !last || last.printing || Date.now() - last.at >= QUIET_LOG_COPY_INTERVAL_MS;
  }

  /** Copies everything the agent still has: the job has ended and its agent will forget it. */
  private async copyAllLogs(run: RunRecord, instance: InstanceRecord | null): Promise<void> {
    if (!instance?.agentUrl || !run.jobId || instance.status === 'terminated') return;
    await copyJobLogs(this.db, agentOf(instance), run, { maxBytes: this.maxLogBytes, budgetMs: Number.POSITIVE_INFINITY });
  }
}

export function agentOf(instance: InstanceRecord): AgentClient {
  return new AgentClient(instance.agentUrl!, instance.agentToken, { timeoutMs: 5000 });
}

/** Young runs are looked at often, so a short task ends (and frees its instance) quickly; old ones once a second. */
function pollDelay(run: RunRecord): number {
  const age = run.startedAt ? Date.now() - run.startedAt.getTime() : 0;
  return Math.min(RUNNING_POLL_MS, 50 + age / 4);
}

function isFinished(job: JobStatus): boolean {
  return job.state === 'exited' || job.state === 'failed' || job.state === 'stopped';
}

function statusReason(status: RunStatus): string {
  return status.charAt(0).toUpperCase() + status.slice(1);
}

function maxDurationSeconds(run: RunRecord): number | null {
  return run.spec.max_duration === undefined ? null : parseDurationOrOff(run.spec.max_duration);
}

function jobFor(run: RunRecord, instance: InstanceRecord): JobSubmission {
  const spec = run.spec;
  return {
    jobId: run.id,
    runName: run.name,
    image: spec.image,
    commands: spec.commands ?? [],
    env: spec.env ?? {},
    files: run.files,
    workingDir: spec.working_dir,
    ports: (spec.ports ?? []).map((p: number | string) => typeof p === 'number' ? p : Number(String(p).split(':').pop())),
    gpus: instance.offer?.gpu.count ?? 0,
  };
}
