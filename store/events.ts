import type { Event } from '../api/objects.js';
import type { Queryable } from './db.js';

export interface EventInput {
  projectId: string;
  objectKind: 'fleet' | 'instance' | 'run' | 'gateway' | 'project';
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
  await db.query(
    `INSERT INTO events (project_id, object_kind, object_id, object_name, reason, message) VALUES ($1, $2, $3, $4, $5, $6)`,
    [e.projectId, e.objectKind, e.objectId, e.objectName, e.reason, e.message]);
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

export async function listEvents(db: Queryable, projectId: string, options: { after?: number; objectName?: string; limit?: number }): Promise<Event[]> {
  const rows = await db.query(
    `SELECT * FROM (
       SELECT * FROM events WHERE project_id = $1 AND id > $2 AND ($3::text IS NULL OR object_name = $3)
       ORDER BY id DESC LIMIT $4) recent ORDER BY id`,
    [projectId, options.after ?? 0, options.objectName ?? null, options.limit ?? 200]);
  return rows.map((r) => ({
    id: r.id, objectKind: r.object_kind, objectName: r.object_name, reason: r.reason, message: r.message,
    createdAt: r.created_at.toISOString(),
  }));
}
