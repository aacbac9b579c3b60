import type { LiveListVersions } from '../api/live-runs.js';
import type { Queryable } from './db.js';

/**
 * A version of each of the project's lists that the console shows besides runs, read in one narrow query: the newest
 * event's id; for fleets and gateways, how many rows and the newest write among them (`xmin`); the instances' cost
 * of the last two hours, which the ledger adds to. Terminated instances count while they are recent.
 */
export async function listVersions(db: Queryable, projectId: string): Promise<LiveListVersions> {
  const [row] = await db.query<LiveListVersions>(
    `SELECT coalesce((SELECT max(id) FROM events WHERE project_id = $1), 0)::text AS events,
       concat_ws('/',
         coalesce((SELECT count(*) || ':' || max(xmin::text::bigint) FROM fleets WHERE project_id = $1), ''),
         coalesce((SELECT count(*) || ':' || max(xmin::text::bigint) FROM instances
          WHERE project_id = $1 AND (status <> 'terminated' OR coalesce(terminated_at, updated_at) > now() - interval '1 hour')), ''),
         coalesce((SELECT sum(dollars) FROM cost_hours WHERE project_id = $1 AND hour >= date_trunc('hour', now()) - interval '1 hour')::text, '')) AS fleets,
       coalesce((SELECT count(*) || ':' || max(xmin::text::bigint) FROM gateways WHERE project_id = $1), '') AS gateways`, [projectId]);
  return row!;
}
