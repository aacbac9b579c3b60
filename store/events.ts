import type { Event } from '../api/objects.js';
import type { Queryable } from './db.js';

export interface EventInput {
  projectId: string;
  objectKind: 'fleet' | 'instance' | 'run' | 'gateway';
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
