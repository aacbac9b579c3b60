import type { Queryable } from '../store/db.js';
import { nodeCount } from '../store/nodes.js';
import { queuedRunRows, queueMark, queueOrder, type QueueEntry, type QueuedRunRow, type QueueReason } from '../store/run-queue.js';

/** What placing a run needs of it beyond its place in the queue; each one's requirement carries its spot_policy. */
export interface QueuedRunParts extends Omit<QueuedRunRow, 'id'> {
  /** How many instances the run takes at once: `nodes` of a task, else 1. */
  nodes: number;
  /** The same for runs that any placement treats alike: what they need and where they may go. */
  placementKey: string;
}

export type QueuedRun = QueueEntry & QueuedRunParts;

function parts(row: QueuedRunRow): QueuedRunParts {
  const requirement = row.spec.spot_policy ? { ...row.requirement, spot: row.spec.spot_policy } : row.requirement;
  const nodes = row.kind === 'task' ? nodeCount(row.spec) : 1;
  return {
    desired: row.desired, status_message: row.status_message, name: row.name, kind: row.kind, replica: row.replica, requirement, spec: row.spec, first_submitted_at: row.first_submitted_at, nodes,
    placementKey: JSON.stringify([requirement, row.spec.backends ?? null, row.spec.fleets ?? null, row.spec.instances ?? null, nodes]),
  };
}

function queuedRun(entry: QueueEntry, parts: QueuedRunParts): QueuedRun {
  return {
    id: entry.id, project_id: entry.project_id, version: entry.version, desired: parts.desired, status_message: parts.status_message,
    name: parts.name, kind: parts.kind, replica: parts.replica, requirement: parts.requirement, spec: parts.spec,
    first_submitted_at: parts.first_submitted_at, nodes: parts.nodes, placementKey: parts.placementKey,
  };
}

/**
 * The queue as the scheduler reads it each pass: its order and each row's version come from the database whenever the
 * queue's mark (store/run-queue.ts#queueMark) says it changed since the last read, and are kept otherwise; the rest of
 * each run (spec and requirement parsed, reason, desired) is kept between passes for as long as its row's version stays
 * the same, and only runs new or written since are read whole.
 */
export class QueuedRuns {
  private kept = new Map<string, { version: string; parts: QueuedRunParts }>();
  private order: { mark: string; entries: QueueEntry[] } | null = null;

  async read(db: Queryable): Promise<QueuedRun[]> {
    // The order is read with its own mark, in one snapshot: a mark read apart from it could name a queue it is not.
    const mark = this.order ? await queueMark(db) : null;
    if (mark === null || mark !== this.order?.mark) this.order = await queueOrder(db);
    const order = this.order.entries;
    const stale = order.filter((entry) => this.kept.get(entry.id)?.version !== entry.version).map((entry) => entry.id);
    const fresh = new Map(stale.length === 0 ? [] : (await queuedRunRows(db, stale)).map((row) => [row.id, parts(row)]));
    const kept = new Map<string, { version: string; parts: QueuedRunParts }>();
    const runs: QueuedRun[] = [];
    for (const entry of order) {
      const found = fresh.get(entry.id) ?? this.kept.get(entry.id)?.parts;
      if (!found) continue;
      kept.set(entry.id, { version: entry.version, parts: found });
      runs.push(queuedRun(entry, found));
    }
    this.kept = kept;
    return runs;
  }

  /** These runs were given these reasons since they were read, nothing else, and are now at these versions. */
  written(reasons: QueueReason[], versions: Map<string, string>): void {
    this.order = null;
    for (const { id, message } of reasons) {
      const kept = this.kept.get(id);
      const version = versions.get(id);
      if (!kept || !version) continue;
      kept.version = version;
      kept.parts.status_message = message;
    }
  }
}
