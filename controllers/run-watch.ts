import type { Logger } from 'winston';
import type { JobStatus } from '../api/agent.js';
import { AgentError, AgentUnreachableError } from '../agent/client.js';
import type { Db, Row } from '../store/db.js';
import { instancesByIds, type InstanceRecord } from '../store/instances.js';
import { appendLogChunks, lastLogSeqs, type LogAppend, type LogChunk } from '../store/logs.js';
import type { RunRecord } from '../store/runs.js';
import { claimWatchedRuns } from '../store/run-watch.js';
import type { SecretBox } from '../store/secrets.js';
import { BatchedCalls, batchedReads } from './batched-calls.js';
import { JobChangeFeeds } from './job-change-feeds.js';
import { recordLogsTruncated } from './log-copy.js';
import { agentOf, FOLLOWED_POLL_MS, isFinished, RunController, RUNNING_POLL_MS, type JobLook } from './run-controller.js';

/** How often a running job's new lines are stored while nothing else makes it due (storeDue). */
const LOG_STORE_INTERVAL_MS = 5000;
/** A look that finds this many bytes of new lines stores them at once, so that an agent never pages the same lines out again and again. */
const STORE_AT_ONCE_BYTES = 4096;
/**
 * The watch's lease where its server is the only one (the embedded database, whose directory one process opens at a
 * time): no other server waits for it to run out, and a restart gives the dead server's leases back at once
 * (server/predecessor-leases.ts). A held run's lease is renewed when half of it is left: once a minute rather than
 * every 7.5 s, each renewal a new version of the row and of its index entries.
 */
export const SOLE_SERVER_WATCH_LEASE_MS = 120_000;

/** What one look at an instance found: its record, and each job's look (none where its agent is asked job by job). */
interface InstanceLook {
  instance: InstanceRecord | null;
  looks: Map<string, JobLook> | null;
  /** The agent did not answer: every run waits for the next look. */
  unreachable: boolean;
}

/**
 * The run-watch loop: looks at running jobs about once a second, an instance at a time. The runs of one instance are
 * claimed together, their instance read, asked about in one agent call (`POST /api/jobs/watch`: every job's state
 * and new lines since the database's last line), their lines stored and their leases given back; then each run takes
 * its step as RunController.watch decides. The reads and the stores of all the instances looked at meanwhile are
 * gathered (batched-calls.ts): one statement each for many instances. An agent older than that call is asked job by
 * job, as before.
 */
export class RunWatchController extends RunController {
  /** Each instance is read once a look, not once for each of its runs: at 10 runs an instance, a tenth of the rows. */
  private readonly instanceReads = batchedReads((ids) => instancesByIds(this.db, ids));
  /** The database's last line of a run that this server has not stored lines of yet; after that, its own store says. */
  private readonly lastLineReads = batchedReads((runIds) => lastLogSeqs(this.db, runIds));
  private readonly appends = new BatchedCalls<LogChunk & { runId: string }, LogAppend>(async (chunks) => {
    const stored = await appendLogChunks(this.db, chunks, this.maxLogBytes);
    return chunks.map((chunk) => stored.get(chunk.runId)!);
  }, (chunk) => chunk.runId);

  /** A job no look asked about for three of its intervals has ended or left this server: its feed forgets it. */
  private readonly feeds = new JobChangeFeeds((runIds) => this.lookSoon(runIds), 3 * FOLLOWED_POLL_MS);

  constructor(db: Db, owner: string, logger: Logger, maxLogBytes: number, secrets: SecretBox, leaseMs?: number) {
    super(db, owner, logger, 'watch', maxLogBytes, secrets, leaseMs);
  }

  override async settle(): Promise<void> {
    this.feeds.close();
    await super.settle();
  }

  protected override claim(limit: number): Promise<Row[]> {
    const { leaseMs, where, claimAheadMs, columns } = this.options;
    return claimWatchedRuns(this.db, this.owner, leaseMs!, limit, where, claimAheadMs!, RUNNING_POLL_MS, columns);
  }

  protected override groupKey(row: Row): string {
    return row.instance_id ?? `run:${row.id}`;
  }

  protected override reconcileGroup(runs: RunRecord[]): Array<Promise<number>> {
    const look = this.lookAt(runs);
    return runs.map(async (run) => {
      const { instance, looks, unreachable } = await look;
      if (unreachable) return RUNNING_POLL_MS;
      const found = looks?.get(run.id);
      if (looks && askedTogether(run) && !found) throw new AgentError(`agent answered 404 (POST ${instance?.agentUrl}/api/jobs/watch): no job ${run.jobId}`, 404, 'job_not_found');
      return this.watch(run, instance, found ?? null);
    });
  }

  /** One look at the jobs of runs on one instance; their new lines are stored before any run takes its step. */
  private async lookAt(runs: RunRecord[]): Promise<InstanceLook> {
    const instanceId = runs[0]!.instanceId;
    const [read, lastLines] = await Promise.all([
      instanceId ? this.instanceReads.call(instanceId) : undefined,
      Promise.all(runs.filter((run) => !this.lastLogCopy.has(run.id)).map(async (run) => [run.id, (await this.lastLineReads.call(run.id))!] as const)),
    ]);
    const instance = read ?? null;
    const asked = runs.filter(askedTogether);
    if (!instance?.agentUrl || instance.status === 'terminated' || instance.status === 'terminating' || asked.length === 0) {
      return { instance, looks: null, unreachable: false };
    }
    const readLines = new Map(lastLines);
    const after = (run: RunRecord) => readLines.get(run.id) ?? this.lastLogCopy.get(run.id)?.lastSeq ?? 0;
    let answer;
    try {
      answer = await agentOf(instance).watchJobs(asked.map((run) => ({ jobId: run.jobId!, after: after(run) })));
    } catch (error) {
      if (error instanceof AgentUnreachableError) return { instance, looks: null, unreachable: true };
      throw error;
    }
    if (!answer) return { instance, looks: null, unreachable: false };
    const byJob = new Map(answer.jobs.map((job) => [job.jobId, job]));
    const seen = asked.flatMap((run) => {
      const { status, log } = byJob.get(run.jobId!) ?? { status: null };
      return status && log ? [{ run, status, log }] : [];
    });
    const now = Date.now();
    const printed = seen.filter(({ run, status, log }) => log.jsonLines !== '' && this.storeDue(run, status, log, now));
    const stored = new Map(await Promise.all(printed.map(async ({ run, log }) => [run.id, await this.appends.call({
      runId: run.id, after: after(run), first: log.first, last: log.next, jsonLines: log.jsonLines,
    })] as const)));
    for (const { run, log } of printed) {
      const outcome = stored.get(run.id)!;
      // A page refused because lines were stored meanwhile (a `logs` request pulls them too): the next look reads the database's last line.
      if (outcome.stored) this.lastLogCopy.set(run.id, { at: now, printing: true, lastSeq: log.next });
      else this.lastLogCopy.delete(run.id);
      if (outcome.firstLoss) await recordLogsTruncated(this.db, run, outcome.droppedLines, this.maxLogBytes);
    }
    const running = seen.filter(({ status }) => !isFinished(status));
    const followed = this.feeds.follow(instance.id, () => agentOf(instance), running.map(({ run, status }) => ({ runId: run.id, jobId: run.jobId!, state: status.state })));
    return {
      instance,
      unreachable: false,
      looks: new Map(seen.map(({ run, status, log }) => [run.id, {
        status, caughtUp: !log.more && (!stored.has(run.id) || stored.get(run.id)!.stored), followed: followed && !isFinished(status),
      }])),
    };
  }

  /**
   * Whether a running job's new lines are stored at this look. Every few seconds is enough while it runs: `logs` and its
   * followers pull what the database lacks from the agent, so they see a line within a second either way, and each
   * look that stores costs a row of `log_chunks` and one of `log_totals`. At once when the job has ended or is to stop
   * (its tail is never lost), when its lines fill a page, and at a run's first look by this server.
   */
  private storeDue(run: RunRecord, status: JobStatus, log: { jsonLines: string; more: boolean }, now: number): boolean {
    const last = this.lastLogCopy.get(run.id);
    return !last || now - last.at >= LOG_STORE_INTERVAL_MS || isFinished(status) || run.status !== 'running' || run.desired !== 'run'
      || log.more || log.jsonLines.length >= STORE_AT_ONCE_BYTES;
  }
}

/** Whether the run's job is asked about with its instance's others: a run to stop is asked alone, so that its stop never waits behind the storing of their lines. */
function askedTogether(run: RunRecord): boolean {
  return run.jobId !== null && !(run.status === 'running' && run.desired !== 'run');
}
