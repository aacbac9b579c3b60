import type { Logger } from 'winston';
import type { JobStatus, JobSubmission } from '../api/agent.js';
import { parseDurationOrOff } from '../api/duration.js';
import { parsePortMapping, parseVolumeMount } from '../api/mappings.js';
import { blockCount, blockGpus } from '../api/blocks.js';
import { jobContainer } from '../api/run-container.js';
import { fillJobSecrets, jobSecretNames } from '../api/interpolation.js';
import { stopReason, type RunStatus, type RunTerminationReason } from '../api/status.js';
import { AgentClient, AgentError, AgentUnreachableError } from '../agent/client.js';
import { CHANNELS, runChange } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { recordEvent, runEvent } from '../store/events.js';
import { getFleetById, type FleetRecord } from '../store/fleets.js';
import { getInstance, releaseInstanceFromRun, type InstanceRecord } from '../store/instances.js';
import { instanceAddress, isNodeJob, MULTI_NODE_PARENT, nodeAddresses, startupWait } from '../store/nodes.js';
import { requeueRun, toRun, updateRun, WATCHED_RUN_COLUMNS, WATCHED_RUN_HELD_COLUMNS, writeRunStep, type RunRecord } from '../store/runs.js';
import { requiredSecrets, type SecretBox } from '../store/secrets.js';
import { SERVICE_PARENT } from '../store/services.js';
import { LEASE_GIVEN_BACK, LeasedController } from './leased.js';
import type { PlacedRun } from './scheduler.js';
import { copyJobLogs } from './log-copy.js';
import { endRun, statusReason } from './run-end.js';
import { UtilizationWatch } from './utilization-policy.js';

export const RUNNING_POLL_MS = 1000;
/**
 * How often a running job is looked at while its instance's change feed (job-change-feeds.ts) follows it: the feed
 * tells of its end at once, and a look is then needed only for its logs, its deadlines and its lease.
 */
export const FOLLOWED_POLL_MS = 5000;
const REQUEUE_BACKOFF_MS = 5000;
/** How often a node whose instance is up looks whether its siblings' instances are up too: all of them start at once. */
const SIBLING_POLL_MS = 200;
/** The agent's upper bound on a stop's grace period (agent/requests.ts). */
const MAX_STOP_GRACE_SECONDS = 3600;
/** How often a quiet job's agent is asked for new lines; a job that printed since is asked at every look. */
const QUIET_LOG_COPY_INTERVAL_MS = 2000;
/** The longest one look at a run spends copying its lines; the rest waits for the next look, at once. */
const LOG_COPY_BUDGET_MS = 250;
/** Running jobs are looked at about once a second; those due within this long are claimed together. */
const WATCH_CLAIM_AHEAD_MS = 100;
/** Running runs watched at once: their instances' jobs are looked at together, one agent call an instance. */
const WATCH_CONCURRENCY = 1024;
/** How long a claim holds a run: a server that dies mid-look leaves its runs to the others for this long. */
const RUN_LEASE_MS = 15_000;

/** What one look at all of an instance's jobs found for one of them. */
export interface JobLook {
  status: JobStatus;
  /** False when the agent has lines of the job that the database does not hold yet: look again at once. */
  caughtUp: boolean;
  /** A change feed follows the job: its end makes the run due without waiting for the next look. */
  followed: boolean;
}

/**
 * Follows each placed run: submits its job to the instance's agent, copies its logs, and ends it.
 * Two loops share this code: one starts placed runs, one watches running ones, so that starting a
 * run never waits behind a pass over thousands of running jobs.
 */
export class RunController extends LeasedController<RunRecord> {
  readonly name: string;
  /** When each run's lines were last copied, whether that copy found any, and the last line stored; hints kept in memory. */
  protected readonly lastLogCopy = new Map<string, { at: number; printing: boolean; lastSeq: number }>();
  private readonly utilization = new UtilizationWatch();
  /** The instance and fleet of runs this server's scheduler placed and handed over, as it read them, for their first start. */
  private readonly placedReads = new Map<string, { instance: InstanceRecord; fleet: FleetRecord }>();

  constructor(db: Db, owner: string, logger: Logger, phase: 'start' | 'watch', protected readonly maxLogBytes: number,
    private readonly secrets: SecretBox, leaseMs = RUN_LEASE_MS) {
    super(db, owner, logger, {
      table: 'runs', channel: CHANNELS.runs, leaseMs, claimAheadMs: phase === 'watch' ? WATCH_CLAIM_AHEAD_MS : 0,
      hears: { statuses: phase === 'start' ? ['provisioning'] : ['running', 'terminating'] },
      concurrency: phase === 'watch' ? WATCH_CONCURRENCY : undefined, holding: phase === 'watch',
      columns: phase === 'watch' ? WATCHED_RUN_COLUMNS : undefined, heldColumns: phase === 'watch' ? WATCHED_RUN_HELD_COLUMNS : undefined,
      where: `${phase === 'start' ? `status = 'provisioning'` : `status IN ('running', 'terminating')`} AND NOT ${SERVICE_PARENT} AND NOT ${MULTI_NODE_PARENT}`,
    });
    this.name = `run-${phase}`;
  }

  protected toRecord(row: Row): RunRecord {
    return toRun(row);
  }

  /** A running job's run stays leased to the watch between its looks, a few seconds apart at most: a look writes nothing to it then. */
  protected override holds(run: RunRecord, nextInMs: number): boolean {
    return (run.status === 'running' || run.status === 'terminating') && nextInMs <= FOLLOWED_POLL_MS;
  }

  /** Starts runs the scheduler of this server placed and leased to this loop, with the instance and fleet it read. */
  startPlaced(placed: PlacedRun[]): void {
    for (const { row, instance, fleet } of placed) this.placedReads.set(row.id, { instance, fleet });
    this.adopt(placed.map(({ row }) => row));
  }

  protected async reconcile(run: RunRecord): Promise<number | typeof LEASE_GIVEN_BACK> {
    const placed = this.placedReads.get(run.id);
    this.placedReads.delete(run.id);
    const instance = placed?.instance ?? (run.instanceId ? await getInstance(this.db, run.instanceId) : null);
    if (run.status === 'provisioning') return this.provisioning(run, instance, placed?.fleet);
    return this.watch(run, instance, null);
  }

  /**
   * A running or terminating run, one step: `look` is what one look at its instance's jobs found (its lines are stored
   * already); without one, the agent is asked about this job alone.
   */
  protected async watch(run: RunRecord, instance: InstanceRecord | null, look: JobLook | null): Promise<number> {
    if (!instance || instance.status === 'terminated' || instance.status === 'terminating') {
      await this.copyAllLogs(run, instance);
      const interrupted = instance?.terminationReason === 'interrupted';
      await this.finish(run, instance, 'failed', interrupted ? 'interrupted' : 'instance_unreachable',
        interrupted ? `spot instance ${instance.name} was interrupted (${instance.statusMessage})` : `instance ${instance?.name ?? ''} is gone (${instance?.terminationReason ?? 'unknown'})`, null);
      return RUNNING_POLL_MS;
    }
    const agent = agentOf(instance);
    let job: JobStatus;
    try {
      job = look?.status ?? await agent.job(run.jobId!);
    } catch (error) {
      if (error instanceof AgentUnreachableError) return RUNNING_POLL_MS;
      throw error;
    }
    const finished = isFinished(job);
    if (!finished && run.status === 'running' && run.desired !== 'run') {
      return this.stopJob(run, agent, run.desired === 'abort' ? 'aborting' : 'stopping', { abort: run.desired === 'abort' });
    }
    const maxSeconds = maxDurationSeconds(run);
    if (!finished && run.status === 'running' && maxSeconds !== null && run.startedAt && Date.now() - run.startedAt.getTime() > maxSeconds * 1000) {
      return this.stopJob(run, agent, `max_duration of ${maxSeconds}s exceeded`);
    }
    const inactiveStopAt = inactivityDeadline(run, job);
    if (inactiveStopAt?.getTime() !== run.inactivityStopAt?.getTime()) {
      await updateRun(this.db, run.id, this.owner, { inactivity_stop_at: inactiveStopAt });
      run.inactivityStopAt = inactiveStopAt;
    }
    if (!finished && run.status === 'running' && inactiveStopAt !== null && Date.now() >= inactiveStopAt.getTime()) {
      return this.stopJob(run, agent, `no SSH connection for inactivity_duration (${run.spec.inactivity_duration})`, { reason: 'inactivity_duration_exceeded' });
    }
    if (!finished && run.status === 'running' && await this.utilization.underused(this.db, this.owner, run, agent)) {
      return this.stopJob(run, agent,
        `every GPU stayed below ${run.spec.utilization_policy.min_gpu_utilization}% for utilization_policy.time_window (${run.spec.utilization_policy.time_window})`,
        { reason: 'gpu_underutilized' });
    }
    if (look) {
      if (!look.caughtUp) return 0;
    } else if (finished || this.logsDue(run.id)) {
      const { copied, caughtUp, lastSeq } = await copyJobLogs(this.db, agent, run, {
        maxBytes: this.maxLogBytes, budgetMs: LOG_COPY_BUDGET_MS, after: this.lastLogCopy.get(run.id)?.lastSeq,
      });
      this.lastLogCopy.set(run.id, { at: Date.now(), printing: copied > 0, lastSeq });
      if (!caughtUp) return 0;
    }
    if (finished) {
      await this.finishJob(run, instance, job);
      return RUNNING_POLL_MS;
    }
    if (run.status === 'terminating') return 250;
    return look?.followed ? followedDelay(run, maxSeconds, inactiveStopAt) : pollDelay(run);
  }

  /** `placedFleet`: the instance's fleet as the placing pass read it, when this server placed the run. */
  private async provisioning(run: RunRecord, instance: InstanceRecord | null, placedFleet?: FleetRecord): Promise<number | typeof LEASE_GIVEN_BACK> {
    if (run.desired !== 'run') {
      if (instance) await releaseInstanceFromRun(this.db, instance.id, run.id);
      await this.finish(run, null, 'terminated', stopReason(run), 'stopped before its job started', null);
      return RUNNING_POLL_MS;
    }
    if (!instance || instance.status === 'terminated' || instance.status === 'terminating') {
      const unusable = `instance ${instance?.name ?? ''} could not be used (${instance?.statusMessage || instance?.terminationReason || 'gone'})`;
      // A node goes back to the queue only with all of its siblings, which its task's controller sees to.
      if (isNodeJob(run)) await this.finish(run, null, 'failed', 'provisioning_failed', unusable, null);
      else await this.requeue(run, `${unusable}; back in the queue`);
      return RUNNING_POLL_MS;
    }
    if (instance.status !== 'busy' || !instance.agentUrl) return RUNNING_POLL_MS;
    const ips = isNodeJob(run) ? await nodeAddresses(this.db, run.parentId!) : [instance.internalIp ?? instanceAddress(instance.agentUrl)];
    if (!ips) return SIBLING_POLL_MS;
    const waiting = isNodeJob(run) ? await startupWait(this.db, run) : null;
    if (waiting) {
      if (run.statusMessage !== waiting) await updateRun(this.db, run.id, this.owner, { status_message: waiting });
      return SIBLING_POLL_MS;
    }
    const fleet = placedFleet ?? await getFleetById(this.db, instance.fleetId);
    const gpuIndices = run.blocks === null ? null : blockGpuIndices(run.blocks, instance, fleet);
    const fleetEnv = (fleet.spec.env ?? {}) as Record<string, string>;
    const submission = await this.withSecrets(run, jobFor(run, instance, ips, gpuIndices, fleetEnv));
    if (typeof submission === 'string') {
      await releaseInstanceFromRun(this.db, instance.id, run.id);
      await this.finish(run, null, 'failed', 'submit_failed', submission, null);
      return RUNNING_POLL_MS;
    }
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
    const handedOver = await this.transition(run, 'running', `running on ${instance.name}`, { job_id: submission.jobId, started_at: new Date() }, { handOver: true });
    return handedOver ? LEASE_GIVEN_BACK : RUNNING_POLL_MS;
  }

  private async finishJob(run: RunRecord, instance: InstanceRecord, job: JobStatus): Promise<void> {
    if (job.state === 'stopped' && run.status !== 'terminating' && run.desired === 'run') {
      await this.finish(run, instance, 'failed', 'instance_terminated', 'the instance stopped the job without being asked to (its agent shut down?)', job.exitCode);
    } else if (run.status === 'terminating' || job.state === 'stopped') {
      const reason: RunTerminationReason = run.desired !== 'run' ? stopReason(run) : run.terminationReason ?? 'max_duration_exceeded';
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
    // The instance is free for the next run as the run ends, and the scheduler hears of it before the agent forgets the job.
    if (!(await endRun(this.db, this.owner, run, { status, reason, message, exitCode, releaseInstance: true }))) return;
    run.status = status;
    this.lastLogCopy.delete(run.id);
    this.utilization.forget(run.id);
    await this.db.notify(CHANNELS.runs, runChange([{ ...run, status }]));
    if (instance && run.jobId && instance.status !== 'terminated') {
      await agentOf(instance).remove(run.jobId).catch(() => {});
    }
  }

  private async requeue(run: RunRecord, message: string): Promise<void> {
    if (!(await requeueRun(this.db, run.id, this.owner, message, REQUEUE_BACKOFF_MS))) return;
    await recordEvent(this.db, runEvent(run, 'Requeued', message));
  }

  /**
   * Writes the run's new status while this server holds its lease; false when it lost it. With `handOver`, the lease is
   * given back (the run due at once) before the NOTIFY, so that the loop it wakes (the watch of a job just started)
   * finds the row free to claim, rather than waiting for its next interval.
   */
  private async transition(run: RunRecord, status: RunStatus, message: string, extra: Record<string, unknown> = {}, { handOver = false } = {}): Promise<boolean> {
    if (!(await writeRunStep(this.db, run.id, this.owner, { status, status_message: message, ...extra }, runEvent(run, statusReason(status), message), { handOver }))) return false;
    run.status = status;
    await this.db.notify(CHANNELS.runs, runChange([run]));
    return true;
  }

  /** Asks the agent to stop the job (within stop_duration, or at once) and marks the run terminating; the next look is soon. */
  private async stopJob(run: RunRecord, agent: AgentClient, message: string, options: { abort?: boolean; reason?: RunTerminationReason } = {}): Promise<number> {
    await agent.stop(run.jobId!, { abort: options.abort, graceSeconds: stopGraceSeconds(run) });
    await this.transition(run, 'terminating', message, options.reason ? { termination_reason: options.reason } : {});
    return 100;
  }

  /**
   * The job with the secrets it names filled in, or why it cannot be made (a secret that does not exist, or that this
   * server's key cannot open). Only the job sent to the agent holds the values: the run's spec keeps the references.
   */
  private async withSecrets(run: RunRecord, job: JobSubmission): Promise<JobSubmission | string> {
    const names = jobSecretNames(job);
    if (names.length === 0) return job;
    const values = await requiredSecrets(this.db, this.secrets, run.projectId, names);
    return typeof values === 'string' ? values : fillJobSecrets(job, values);
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

/** The GPUs of the blocks the run holds on its shared instance. */
function blockGpuIndices(blocks: number[], instance: InstanceRecord, fleet: FleetRecord): number[] {
  const gpus = instance.offer?.gpu.count ?? 0;
  return blockGpus(blocks, gpus, blockCount(fleet.spec, gpus, instance.sshHost?.name ?? null));
}

export function agentOf(instance: InstanceRecord): AgentClient {
  return new AgentClient(instance.agentUrl!, instance.agentToken, { timeoutMs: 5000 });
}

/** Young runs are looked at often, so a short task ends (and frees its instance) quickly; old ones once a second. */
function pollDelay(run: RunRecord): number {
  const age = run.startedAt ? Date.now() - run.startedAt.getTime() : 0;
  return Math.min(RUNNING_POLL_MS, 50 + age / 4);
}

/** A followed job's next look: FOLLOWED_POLL_MS, or sooner when its max_duration or its inactivity_duration runs out first. */
function followedDelay(run: RunRecord, maxSeconds: number | null, inactiveStopAt: Date | null): number {
  const now = Date.now();
  const deadlines = [
    maxSeconds !== null && run.startedAt ? run.startedAt.getTime() + maxSeconds * 1000 : Number.POSITIVE_INFINITY,
    inactiveStopAt?.getTime() ?? Number.POSITIVE_INFINITY,
  ];
  return Math.max(0, Math.min(FOLLOWED_POLL_MS, ...deadlines.map((at) => at - now + 1)));
}

export function isFinished(job: JobStatus): boolean {
  return job.state === 'exited' || job.state === 'failed' || job.state === 'stopped';
}

/** How long a stopped job gets to exit before it is killed: stop_duration, or the agent's default; `off` waits the longest the agent allows. */
function stopGraceSeconds(run: RunRecord): number | undefined {
  if (run.spec.stop_duration === undefined) return undefined;
  return parseDurationOrOff(run.spec.stop_duration) ?? MAX_STOP_GRACE_SECONDS;
}

function maxDurationSeconds(run: RunRecord): number | null {
  return run.spec.max_duration === undefined ? null : parseDurationOrOff(run.spec.max_duration);
}

/**
 * When a dev environment with no SSH connection open stops: inactivity_duration after the last SSH activity, or after
 * its start when nobody connected yet; null while a connection is open, for other runs, and with `off`.
 */
export function inactivityDeadline(run: RunRecord, job: Pick<JobStatus, 'sshConnections' | 'lastSshActivityAt'>): Date | null {
  if (run.kind !== 'dev-environment' || run.spec.inactivity_duration === undefined || !run.startedAt) return null;
  const seconds = parseDurationOrOff(run.spec.inactivity_duration);
  if (seconds === null || (job.sshConnections ?? 0) > 0) return null;
  const lastActivity = job.lastSshActivityAt ? Math.max(Date.parse(job.lastSshActivityAt), run.startedAt.getTime()) : run.startedAt.getTime();
  return new Date(lastActivity + seconds * 1000);
}

/** A dev environment's shell: its init once, then nothing until it is stopped (a loop, because busybox's sleep knows no infinity). */
function devEnvironmentCommands(init: string[] | undefined): string[] {
  return [...(init ?? []), 'while true; do sleep 3600; done'];
}

/**
 * The job of a run on its instance; `ips` are the addresses of every node's instance in rank order (one for a single job),
 * `gpuIndices` the GPUs of its blocks when it shares the instance.
 */
function jobFor(run: RunRecord, instance: InstanceRecord, ips: string[], gpuIndices: number[] | null, fleetEnv: Record<string, string>): JobSubmission {
  const spec = run.spec;
  return {
    jobId: run.id,
    runName: run.name,
    ...jobContainer(spec, run.kind === 'dev-environment' ? devEnvironmentCommands(spec.init) : spec.commands ?? []),
    env: { ...fleetEnv, ...spec.env },
    files: run.files,
    workingDir: spec.working_dir,
    ports: run.kind === 'service' ? [spec.port] : (spec.ports ?? []).map((p: number | string) => parsePortMapping(p).container),
    servicePort: run.kind === 'service' ? spec.port : undefined,
    gpus: gpuIndices?.length ?? instance.offer?.gpu.count ?? 0,
    ...(gpuIndices && { gpuIndices }),
    nodes: { rank: isNodeJob(run) ? run.replica! : 0, ips },
    registryAuth: spec.registry_auth,
    repos: run.repos,
    volumes: (spec.volumes ?? []).map(parseVolumeMount),
  };
}
