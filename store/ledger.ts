import type { CostGroup, CostReport } from '../api/costs.js';
import type { Queryable } from './db.js';

/**
 * The ledger (docs/costs.md): an instance accrues its price per second from the moment its backend accepted its
 * creation until the backend confirmed its termination. `instance_accruals` holds how far each instance has been
 * counted; `cost_hours` the dollars, per UTC hour and per run that held the instance ('' for time none held,
 * charged to the fleet). Each accrual moves `accrued_until` and adds what lies between in one statement, under
 * the row's lock, so two servers never count a second twice and a killed server loses only what it had not written.
 */

/** Opens the instance's account at `at`, when the backend accepted its creation; a second open is a no-op. */
export async function openAccrual(db: Queryable, instanceId: string, pricePerHour: number, at: Date): Promise<void> {
  await db.query(
    `INSERT INTO instance_accruals (instance_id, price_per_hour, started_at, accrued_until) VALUES ($1, $2, $3, $3)
     ON CONFLICT (instance_id) DO NOTHING`, [instanceId, pricePerHour, at]);
}

/**
 * Counts every open account up to now (a terminated instance's up to its termination, and closes it), through the
 * database's ledger_count (migration 14), which triggers (migrations 14 and 23) also call whenever a run takes or gives back an instance
 * or blocks of one, so each run is charged exactly the time it held the instance: its share (the GPUs it asked for over the
 * instance's, its blocks over the instance's, or the whole), the rest the fleet's. A service's replicas and a multi-node task's nodes are charged to the service or task. Accounts another server is counting right now are skipped. With `endedOnly`, only the
 * accounts of terminated instances: a cheap look that settles an instance's cost as soon as it ends. Returns how many were counted.
 */
export async function accrue(db: Queryable, options: { endedOnly?: boolean; limit?: number } = {}): Promise<number> {
  const [row] = await db.query<{ counted: number }>(
    `WITH due AS (
       SELECT a.instance_id, i.run_id FROM instance_accruals a JOIN instances i ON i.id = a.instance_id
       WHERE NOT a.closed AND (NOT $2 OR i.status = 'terminated')
       ORDER BY a.accrued_until LIMIT $1
       FOR UPDATE OF a SKIP LOCKED
     )
     SELECT coalesce(ledger_count(array_agg(instance_id), array_agg(run_id)), 0) AS counted FROM due`,
    [options.limit ?? 10_000, options.endedOnly === true]);
  return row?.counted ?? 0;
}

/** Dollars of each run so far (a service's and a multi-node task's: their replicas' or nodes'), by the runs' ids. */
export async function runCosts(db: Queryable, runIds: string[]): Promise<Map<string, number>> {
  if (runIds.length === 0) return new Map();
  const rows = await db.query<{ id: string; dollars: number }>(
    `SELECT run_id AS id, sum(dollars)::float8 AS dollars FROM cost_hours WHERE run_id = ANY($1::text[]) GROUP BY run_id`, [runIds]);
  return new Map(rows.map((r) => [r.id, r.dollars]));
}

/** Dollars the project spent from `since` (an hour boundary: the start of a budget period) on. */
export async function projectSpent(db: Queryable, projectId: string, since: Date): Promise<number> {
  const [row] = await db.query<{ dollars: number | null }>(
    `SELECT sum(dollars)::float8 AS dollars FROM cost_hours WHERE project_id = $1 AND hour >= $2`, [projectId, since]);
  return row?.dollars ?? 0;
}

/** Per group: what the hourly pieces are first summed by (one key of cost_hours), and how those sums find their names. */
const GROUPS: Record<CostGroup, { key: string; join: string; name: string }> = {
  project: { key: 'project_id', join: 'JOIN projects p ON p.id = s.key', name: 'p.name' },
  user: { key: 'run_id', join: `LEFT JOIN runs r ON r.id = s.key AND s.key <> '' LEFT JOIN users u ON u.id = r.user_id`, name: `coalesce(u.name, '-')` },
  run: { key: 'run_id', join: `LEFT JOIN runs r ON r.id = s.key AND s.key <> ''`, name: `coalesce(r.name, '-')` },
  fleet: { key: 'instance_id', join: 'JOIN instances i ON i.id = s.key JOIN fleets f ON f.id = i.fleet_id', name: 'f.name' },
  backend: { key: 'instance_id', join: 'JOIN instances i ON i.id = s.key', name: 'i.backend' },
};

/**
 * The project's costs in [since, until) (whole hours: the ledger keeps hourly pieces), grouped, dearest first: the first
 * `limit` rows (all with 0), and the rest summed in `others`. `total` is of every row.
 */
export async function costReport(db: Queryable, project: { id: string; name: string }, by: CostGroup, since: Date, until: Date, limit: number): Promise<CostReport> {
  const group = GROUPS[by];
  const rows = await db.query<{ name: string; seconds: number; dollars: number; groups: number; all_seconds: number; all_dollars: number }>(
    `SELECT name, seconds, dollars, count(*) OVER ()::int AS groups, sum(seconds) OVER ()::float8 AS all_seconds, sum(dollars) OVER ()::float8 AS all_dollars
     FROM (SELECT ${group.name} AS name, sum(s.seconds)::float8 AS seconds, sum(s.dollars)::float8 AS dollars
           FROM (SELECT ${group.key} AS key, sum(seconds) AS seconds, sum(dollars) AS dollars FROM cost_hours
                 WHERE project_id = $1 AND hour >= date_trunc('hour', $2::timestamptz) AND hour < $3 GROUP BY 1) s
           ${group.join}
           GROUP BY 1) named
     ORDER BY dollars DESC, name LIMIT $4`, [project.id, since, until, limit > 0 ? limit : null]);
  const [first] = rows;
  const shown = rows.map(({ name, seconds, dollars }) => ({ name, seconds, dollars }));
  const sum = (field: 'seconds' | 'dollars') => shown.reduce((total, row) => total + row[field], 0);
  return {
    project: project.name, by, since: since.toISOString(), until: until.toISOString(), total: first?.all_dollars ?? 0, rows: shown,
    others: { count: (first?.groups ?? 0) - shown.length, seconds: (first?.all_seconds ?? 0) - sum('seconds'), dollars: (first?.all_dollars ?? 0) - sum('dollars') },
  };
}

/** Dollars per hour of the instances that accrue now, and dollars spent in all, per project and backend (GET /metrics). */
export async function spendFigures(db: Queryable): Promise<{ project: string; backend: string; perHour: number; spent: number }[]> {
  return db.query(
    `SELECT p.name AS project, i.backend,
       sum(CASE WHEN NOT a.closed THEN a.price_per_hour ELSE 0 END)::float8 AS "perHour", sum(a.dollars)::float8 AS spent
     FROM instance_accruals a JOIN instances i ON i.id = a.instance_id JOIN projects p ON p.id = i.project_id
     GROUP BY p.name, i.backend ORDER BY 1, 2`);
}

/** Dollars per hour of the project's instances that accrue now. */
export async function projectBurn(db: Queryable, projectId: string): Promise<number> {
  const [row] = await db.query<{ burn: number | null }>(
    `SELECT sum(a.price_per_hour)::float8 AS burn FROM instance_accruals a JOIN instances i ON i.id = a.instance_id
     WHERE i.project_id = $1 AND NOT a.closed`, [projectId]);
  return row?.burn ?? 0;
}
