import type { Queryable } from './db.js';
import { FINISHED } from './runs.js';

/** What GET /metrics counts, read at scrape time: runs and instances by status, and the live services. */

export interface RunCount {
  project: string;
  kind: string;
  status: string;
  count: number;
}

export interface InstanceCount {
  project: string;
  backend: string;
  status: string;
  count: number;
}

export interface LiveService {
  id: string;
  project: string;
  run: string;
  desiredReplicas: number;
  readyReplicas: number;
}

/** Runs as users see them (a service once, not once per replica), deleted ones left out. */
export async function runCounts(db: Queryable): Promise<RunCount[]> {
  return db.query<RunCount>(
    `SELECT p.name AS project, r.kind, r.status, count(*)::int AS count FROM runs r JOIN projects p ON p.id = r.project_id
     WHERE NOT r.deleted AND r.service_id IS NULL GROUP BY p.name, r.kind, r.status ORDER BY 1, 2, 3`);
}

export async function instanceCounts(db: Queryable): Promise<InstanceCount[]> {
  return db.query<InstanceCount>(
    `SELECT p.name AS project, i.backend, i.status, count(*)::int AS count FROM instances i JOIN projects p ON p.id = i.project_id
     GROUP BY p.name, i.backend, i.status ORDER BY 1, 2, 3`);
}

/** Every service that has not ended, with its replicas in rotation (ready and not draining) and the count it aims for. */
export async function liveServices(db: Queryable): Promise<LiveService[]> {
  return db.query<LiveService>(
    `SELECT s.id, p.name AS project, s.name AS run, coalesce(s.desired_replicas, 0) AS "desiredReplicas",
       (SELECT count(*)::int FROM runs r WHERE r.service_id = s.id AND NOT r.deleted AND r.status = 'running'
          AND r.ready_at IS NOT NULL AND r.draining_since IS NULL) AS "readyReplicas"
     FROM runs s JOIN projects p ON p.id = s.project_id
     WHERE s.kind = 'service' AND s.service_id IS NULL AND NOT s.deleted AND s.status NOT IN ${FINISHED}
     ORDER BY p.name, s.name`);
}
