import type { Logger } from 'winston';
import { FINISHED_RUN_STATUSES, stopReason, type RunStatus, type RunTerminationReason } from '../api/status.js';
import { CHANNELS } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { recordEvent, runEvent } from '../store/events.js';
import { dropNodes, listNodes, MULTI_NODE_PARENT } from '../store/nodes.js';
import { requestRunStop, toRun, updateRun, type RunRecord } from '../store/runs.js';
import { LeasedController } from './leased.js';
import { endRun, statusReason } from './run-end.js';

/** How often a multi-node task is looked at: how soon the other nodes are stopped once one ends. */
const LOOK_MS = 250;
const REQUEUE_BACKOFF_MS = 5000;

/**
 * Owns each multi-node task once the scheduler has placed its nodes (store/nodes.ts): it is running once every node
 * runs, and done once every node exited 0 (with `stop_criteria: master-done`, once node 0 did, the others being
 * stopped then). When a node ends otherwise, or the user stops the task, the other nodes are stopped and the task
 * ends as that node did; a node whose instance could not be provisioned, before any node started, puts the whole
 * task back in the queue instead, so that no instance stays held for it.
 */
export class NodesController extends LeasedController<RunRecord> {
  readonly name = 'nodes';

  constructor(db: Db, owner: string, logger: Logger) {
    super(db, owner, logger, {
      table: 'runs', channel: CHANNELS.runs, leaseMs: 15_000,
      where: `${MULTI_NODE_PARENT} AND status IN ('provisioning', 'running', 'terminating')`, hears: { statuses: [], family: true },
    });
  }

  protected toRecord(row: Row): RunRecord {
    return toRun(row);
  }

  protected async reconcile(run: RunRecord): Promise<number> {
    const nodes = await listNodes(this.db, run.id);
    const live = nodes.filter((node) => !FINISHED_RUN_STATUSES.includes(node.status));
    const firstEnded = nodes.filter((node) => node.status === 'failed' || node.status === 'terminated')
      .sort((a, b) => a.finishedAt!.getTime() - b.finishedAt!.getTime())[0];
    const master = nodes.find((node) => node.replica === 0);
    const masterDone = run.spec.stop_criteria === 'master-done' && master?.status === 'done'
      && (!firstEnded || firstEnded.finishedAt!.getTime() >= master.finishedAt!.getTime());
    if (run.desired === 'run' && masterDone) return this.stopWorkers(run, nodes, live);
    if (run.desired !== 'run' || firstEnded) return this.stopNodes(run, nodes, live, firstEnded);
    if (live.length === 0) {
      await this.end(run, nodes, 'done', 'done_by_user_code', `all ${nodes.length} nodes exited with code 0`, 0);
    } else if (run.status === 'provisioning' && live.every((node) => node.status === 'running')) {
      await this.transition(run, 'running', `running on ${nodes.length} nodes`, { started_at: new Date() });
    }
    return LOOK_MS;
  }

  /** `stop_criteria: master-done` and node 0 exited 0: the others are stopped, and the task is done once none runs. */
  private async stopWorkers(run: RunRecord, nodes: RunRecord[], live: RunRecord[]): Promise<number> {
    const toStop = live.filter((node) => node.desired === 'run');
    for (const node of toStop) await requestRunStop(this.db, node.id, false);
    if (toStop.length > 0) await this.db.notify(CHANNELS.runs);
    const why = 'node 0 exited with code 0 (stop_criteria: master-done)';
    if (live.length > 0) {
      if (run.status !== 'terminating') await this.transition(run, 'terminating', `${why}; stopping the other nodes`);
      return LOOK_MS;
    }
    await this.end(run, nodes, 'done', 'done_by_user_code', `${why}; the other nodes were stopped`, 0);
    return LOOK_MS;
  }

  /** Stops every node still running; once none is, ends the task as the first node to end did, or as the user asked. */
  private async stopNodes(run: RunRecord, nodes: RunRecord[], live: RunRecord[], firstEnded: RunRecord | undefined): Promise<number> {
    const abort = run.desired === 'abort';
    const toStop = live.filter((node) => node.desired === 'run');
    for (const node of toStop) await requestRunStop(this.db, node.id, abort);
    if (toStop.length > 0) await this.db.notify(CHANNELS.runs);
    if (run.status !== 'terminating') {
      const why = run.desired !== 'run' ? (abort ? 'aborting' : 'stopping')
        : `node ${firstEnded!.replica} ${firstEnded!.status}: ${firstEnded!.statusMessage}; stopping the other nodes`;
      await this.transition(run, 'terminating', why);
    }
    if (live.length > 0) return LOOK_MS;
    if (run.desired !== 'run') {
      const reason = stopReason(run);
      await this.end(run, nodes, 'terminated', reason, 'every node stopped', null);
    } else if (firstEnded!.terminationReason === 'provisioning_failed' && nodes.every((node) => node.startedAt === null)) {
      await this.requeue(run, `node ${firstEnded!.replica}: ${firstEnded!.statusMessage}; every node back in the queue`);
      return REQUEUE_BACKOFF_MS;
    } else {
      const { status, terminationReason, statusMessage, exitCode } = firstEnded!;
      await this.end(run, nodes, status, terminationReason!, `node ${firstEnded!.replica}: ${statusMessage}`, exitCode);
    }
    return LOOK_MS;
  }

  private async end(run: RunRecord, nodes: RunRecord[], status: RunStatus, reason: RunTerminationReason, message: string, exitCode: number | null): Promise<void> {
    const starts = nodes.flatMap((node) => (node.startedAt ? [node.startedAt.getTime()] : []));
    const startedAt = run.startedAt ?? (starts.length > 0 ? new Date(Math.min(...starts)) : undefined);
    if (await endRun(this.db, this.owner, run, { status, reason, message, exitCode, startedAt })) await this.db.notify(CHANNELS.runs);
  }

  /** Puts the task back in the queue, as it was before it was placed; its nodes, all ended, are dropped. */
  private async requeue(run: RunRecord, message: string): Promise<void> {
    const requeued = await this.db.transaction(async (tx) => {
      if (!(await updateRun(tx, run.id, this.owner, { status: 'submitted', status_message: message, fleet_id: null }))) return false;
      await dropNodes(tx, run.id);
      await recordEvent(tx, runEvent(run, 'Requeued', message));
      return true;
    });
    if (requeued) await this.db.notify(CHANNELS.runs);
  }

  private async transition(run: RunRecord, status: 'running' | 'terminating', message: string, extra: { started_at?: Date } = {}): Promise<void> {
    if (!(await updateRun(this.db, run.id, this.owner, { status, status_message: message, ...extra }))) return;
    run.status = status;
    await recordEvent(this.db, runEvent(run, statusReason(status), message));
    await this.db.notify(CHANNELS.runs);
  }
}
