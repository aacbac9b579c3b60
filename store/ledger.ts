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
 * accounts of terminated instances: a cheap look that settles an instance's cost as soon as it ends (with none due, ledger_count
 * is not called). Returns how many were counted.
 */
export async function accrue(db: Queryable, options: { endedOnly?: boolean; limit?: number; countedBefore?: Date } = {}): Promise<number> {
  const [row] = await db.query<{ counted: number }>(
    `WITH due AS (
       SELECT a.instance_id, i.run_id FROM instance_accruals a JOIN instances i ON i.id = a.instance_id
       WHERE NOT a.closed AND (NOT $2 OR i.status = 'terminated') AND ($3::timestamptz IS NULL OR a.accrued_until < $3)
       ORDER BY a.accrued_until LIMIT $1
       FOR UPDATE OF a SKIP LOCKED
     )
     SELECT ledger_count(array_agg(instance_id), array_agg(run_id)) AS counted FROM due HAVING count(*) > 0`,
    [options.limit ?? 10_000, options.endedOnly === true, options.countedBefore ?? null]);
  return row?.counted ?? 0;
}

/**
 * How many accounts one statement counts or rolls. PGlite runs a statement in the server's own thread: one count of
 * 1 000 busy instances held it, and with it every request, for about a second at 10 000 active runs (bench/README.md,
 * "The ledger's count a batch at a time").
 */
const LEDGER_BATCH = 50;

/** Runs `step` on up to `batch` accounts at a time until one takes fewer; returns how many all of them took. */
async function inBatches(batch: number, step: (limit: number) => Promise<number>): Promise<number> {
  let total = 0;
  for (;;) {
    const taken = await step(batch);
    total += taken;
    if (taken < batch) return total;
  }
}

/**
 * Counts every open account as accrue does, `batch` accounts a statement, each once: a batch moves the accounts it
 * counts past the moment this count began, and the next takes only those still before it. Returns how many were counted.
 */
export async function accrueAll(db: Queryable, batch = LEDGER_BATCH): Promise<number> {
  const [{ began }] = await db.query<{ began: Date }>('SELECT now() AS began');
  return inBatches(batch, (limit) => accrue(db, { limit, countedBefore: began }));
}

/**
 * Adds the pieces of hours the instances' counts are done with (before the hour of `accrued_until`; all of them once an
 * account is closed) to their days in cost_days, with the holder's name and user, and moves `rolled_until` past them, in
 * one statement, so a report (one snapshot) reads each piece once: from its day if rolled, from cost_hours if not. Counts
 * only add to the hour of `accrued_until` and later, so a rolled piece never grows. Accounts another server is rolling or
 * counting right now are skipped. Returns how many accounts were rolled.
 */
export async function rollDays(db: Queryable, limit = 10_000): Promise<number> {
  const [row] = await db.query<{ rolled: number }>(
    `WITH due AS (
       SELECT instance_id, rolled_until AS from_t,
         CASE WHEN closed THEN 'infinity'::timestamptz ELSE date_trunc('hour', accrued_until) END AS until_t
       FROM instance_accruals
       WHERE rolled_until <> 'infinity' AND rolled_until < CASE WHEN closed THEN 'infinity'::timestamptz ELSE date_trunc('hour', accrued_until) END
       ORDER BY instance_id LIMIT $1
       FOR UPDATE SKIP LOCKED
     ), moved AS (
       UPDATE instance_accruals a SET rolled_until = d.until_t FROM due d WHERE a.instance_id = d.instance_id
     ), added AS (
       INSERT INTO cost_days (day, instance_id, run_id, project_id, run_name, user_id, seconds, dollars)
       SELECT date_trunc('day', c.hour, 'UTC'), c.instance_id, c.run_id, c.project_id, coalesce(r.name, ''), coalesce(r.user_id, ''),
         sum(c.seconds), sum(c.dollars)
       FROM due d JOIN cost_hours c ON c.instance_id = d.instance_id AND c.hour >= d.from_t AND c.hour < d.until_t
       LEFT JOIN runs r ON r.id = c.run_id AND c.run_id <> ''
       GROUP BY 1, 2, 3, 4, 5, 6
       ON CONFLICT ON CONSTRAINT cost_days_pkey DO UPDATE
         SET seconds = cost_days.seconds + excluded.seconds, dollars = cost_days.dollars + excluded.dollars
     )
     SELECT count(*)::int AS rolled FROM due`, [limit]);
  return row?.rolled ?? 0;
}

/** Rolls every account as rollDays does, `batch` accounts a statement: a rolled account is done until its next hour. */
export async function rollAllDays(db: Queryable, batch = LEDGER_BATCH): Promise<number> {
  return inBatches(batch, (limit) => rollDays(db, limit));
}

/** Dollars of each run so far (a service's and a multi-node task's: their replicas' or nodes'), by the runs' ids. */
export async function runCosts(db: Queryable, runIds: string[]): Promise<Map<string, number>> {
  if (runIds.length === 0) return new Map();
  const rows = await db.query<{ id: string; dollars: number }>(
    `SELECT run_id AS id, sum(dollars)::float8 AS dollars FROM cost_hours WHERE run_id = ANY($1::text[]) GROUP BY run_id`, [runIds]);
  return new Map(rows.map((r) => [r.id, r.dollars]));
}

/** Dollars the project spent from `since` (the start of a budget period) on. */
export async function projectSpent(db: Queryable, projectId: string, since: Date): Promise<number> {
  const [row] = await db.query<{ dollars: number | null }>(
    `SELECT sum(dollars)::float8 AS dollars FROM (${WINDOW_PIECES}) pieces`, [projectId, ...windowBounds(since, END_OF_TIME)]);
  return row?.dollars ?? 0;
}

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;
const END_OF_TIME = new Date('9999-12-31T00:00:00Z');

/**
 * A window's bounds for WINDOW_PIECES: [since, until) in whole hours ($2, $3: since goes back to its hour, as the ledger
 * keeps hourly pieces), and the whole UTC days within it ($4, $5; an empty range when there are none).
 */
function windowBounds(since: Date, until: Date): Date[] {
  const from = new Date(Math.floor(since.getTime() / HOUR_MS) * HOUR_MS);
  const daysFrom = new Date(Math.ceil(from.getTime() / DAY_MS) * DAY_MS);
  const daysUntil = new Date(Math.max(daysFrom.getTime(), Math.floor(until.getTime() / DAY_MS) * DAY_MS));
  return [from, until, daysFrom, daysUntil];
}

/**
 * The project's ($1) pieces of cost in a window (windowBounds), each once, with the holder's name and user: the whole days
 * from their sums in cost_days and the pieces not yet rolled into them (rollDays), the hours at either end from cost_hours.
 */
const WINDOW_PIECES = `
  SELECT project_id, instance_id, run_name, user_id, seconds, dollars FROM cost_days
  WHERE project_id = $1 AND day >= $4 AND day < $5
  UNION ALL
  SELECT c.project_id, c.instance_id, coalesce(r.name, ''), coalesce(r.user_id, ''), c.seconds, c.dollars
  FROM cost_hours c LEFT JOIN runs r ON r.id = c.run_id AND c.run_id <> ''
  WHERE c.project_id = $1 AND c.hour >= $2 AND c.hour < $3 AND (c.hour < $4 OR c.hour >= $5)
  UNION ALL
  SELECT c.project_id, c.instance_id, coalesce(r.name, ''), coalesce(r.user_id, ''), c.seconds, c.dollars
  FROM instance_accruals a JOIN cost_hours c ON c.instance_id = a.instance_id AND c.hour >= a.rolled_until
  LEFT JOIN runs r ON r.id = c.run_id AND c.run_id <> ''
  WHERE a.rolled_until <> 'infinity' AND c.project_id = $1 AND c.hour >= $4 AND c.hour < $5`;

/**
 * Per group: what the pieces are first summed by, and how those sums find their names (none to find for runs: pieces
 * carry the holder's name, '' for the fleet's time). by user and by run name what held the instance; '-' is the fleet's time.
 */
const GROUPS: Record<CostGroup, { key: string; join?: string; name: string }> = {
  project: { key: 'project_id', join: 'JOIN projects p ON p.id = s.key', name: 'p.name' },
  user: { key: 'user_id', join: 'LEFT JOIN users u ON u.id = s.key', name: `coalesce(u.name, '-')` },
  run: { key: 'run_name', name: `CASE s.key WHEN '' THEN '-' ELSE s.key END` },
  fleet: { key: 'instance_id', join: 'JOIN instances i ON i.id = s.key JOIN fleets f ON f.id = i.fleet_id', name: 'f.name' },
  backend: { key: 'instance_id', join: 'JOIN instances i ON i.id = s.key', name: 'i.backend' },
};

/**
 * The project's costs in [since, until) (whole hours: the ledger keeps hourly pieces), grouped, dearest first: the first
 * `limit` rows (all with 0), and the rest summed in `others`. `total` is of every row.
 */
export async function costReport(db: Queryable, project: { id: string; name: string }, by: CostGroup, since: Date, until: Date, limit: number): Promise<CostReport> {
  const group = GROUPS[by];
  const sums = `SELECT ${group.key} AS key, sum(seconds) AS seconds, sum(dollars) AS dollars FROM (${WINDOW_PIECES}) pieces GROUP BY 1`;
  const named = group.join
    ? `SELECT ${group.name} AS name, sum(s.seconds)::float8 AS seconds, sum(s.dollars)::float8 AS dollars FROM (${sums}) s ${group.join} GROUP BY 1`
    : `SELECT ${group.name} AS name, s.seconds::float8 AS seconds, s.dollars::float8 AS dollars FROM (${sums}) s`;
  const rows = await db.query<{ name: string; seconds: number; dollars: number; groups: number; all_seconds: number; all_dollars: number }>(
    `SELECT name, seconds, dollars, count(*) OVER ()::int AS groups, sum(seconds) OVER ()::float8 AS all_seconds, sum(dollars) OVER ()::float8 AS all_dollars
     FROM (${named}) named
     ORDER BY dollars DESC, name LIMIT $6`, [project.id, ...windowBounds(since, until), limit > 0 ? limit : null]);
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
