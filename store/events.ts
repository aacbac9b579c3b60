import type { Event, EventObjectKind } from '../api/objects.js';
import type { Queryable } from './db.js';

export interface EventInput {
  projectId: string;
  objectKind: EventObjectKind;
  objectId: string;
  objectName: string;
  reason: string;
  message: string;
}

/**
 * An event of a run; a service's replica (or a multi-node task's node) speaks under its run's name, and says which
 * replica (node) it is, so that one that stops never reads as the run itself ending.
 */
export function runEvent(run: { id: string; projectId: string; name: string; kind?: string; replica: number | null }, reason: string, message: string): EventInput {
  const part = run.replica === null ? null : run.kind === 'task' ? 'node' : 'replica';
  return {
    projectId: run.projectId, objectKind: 'run', objectId: run.id, objectName: run.name,
    reason: part ? `${part === 'node' ? 'Node' : 'Replica'}${reason}` : reason, message: part ? `${part} ${run.replica}: ${message}` : message,
  };
}

export async function recordEvent(db: Queryable, e: EventInput): Promise<void> {
  await db.query(`${INSERT_EVENT} VALUES ($1, $2, $3, $4, $5, $6)`, eventParams(e));
}

/** The start of an event's insert, for a statement that gives its values (eventParams, in this order) itself. */
export const INSERT_EVENT = 'INSERT INTO events (project_id, object_kind, object_id, object_name, reason, message)';

export function eventParams(e: EventInput): string[] {
  return [e.projectId, e.objectKind, e.objectId, e.objectName, e.reason, e.message];
}

/** An event of any project, as the server's terminal shows it. */
export interface LoggedEvent {
  id: number;
  project: string;
  objectKind: string;
  objectName: string;
  reason: string;
  message: string;
  createdAt: Date;
}

/** The newest event's id; 0 before the first. */
export async function lastEventId(db: Queryable): Promise<number> {
  const [row] = await db.query<{ id: number | null }>(`SELECT max(id) AS id FROM events`);
  return row?.id ?? 0;
}

/** Events of every project after `after`, oldest first. */
export async function eventsAfter(db: Queryable, after: number, limit: number): Promise<LoggedEvent[]> {
  const rows = await db.query(
    `SELECT e.*, p.name AS project FROM events e JOIN projects p ON p.id = e.project_id WHERE e.id > $1 ORDER BY e.id LIMIT $2`, [after, limit]);
  return rows.map((r) => ({
    id: r.id, project: r.project, objectKind: r.object_kind, objectName: r.object_name, reason: r.reason, message: r.message, createdAt: r.created_at,
  }));
}

/** Which events `listEvents` returns: after a cursor, of one object or kind of object, in a time window; the newest `limit`. */
export interface EventFilter {
  after?: number;
  objectName?: string;
  objectKind?: EventObjectKind;
  since?: Date;
  until?: Date;
  limit?: number;
}

export async function listEvents(db: Queryable, projectId: string, filter: EventFilter): Promise<Event[]> {
  const rows = await db.query(
    `SELECT * FROM (
       SELECT * FROM events WHERE project_id = $1 AND id > $2 AND ($3::text IS NULL OR object_name = $3)
         AND ($4::text IS NULL OR object_kind = $4) AND ($5::timestamptz IS NULL OR created_at >= $5)
         AND ($6::timestamptz IS NULL OR created_at <= $6)
       ORDER BY id DESC LIMIT $7) recent ORDER BY id`,
    [projectId, filter.after ?? 0, filter.objectName ?? null, filter.objectKind ?? null, filter.since ?? null, filter.until ?? null, filter.limit ?? 200]);
  return rows.map((r) => ({
    id: r.id, objectKind: r.object_kind, objectName: r.object_name, reason: r.reason, message: r.message,
    createdAt: r.created_at.toISOString(),
  }));
}

/** Milliseconds since an object's last event of `reason`; null when it has none. */
export async function msSinceLastEvent(db: Queryable, projectId: string, objectId: string, reason: string): Promise<number | null> {
  const [{ ms }] = await db.query<{ ms: number | null }>(
    `SELECT (EXTRACT(EPOCH FROM now() - max(created_at)) * 1000)::float8 AS ms FROM events
     WHERE project_id = $1 AND object_id = $2 AND reason = $3`, [projectId, objectId, reason]);
  return ms;
}
