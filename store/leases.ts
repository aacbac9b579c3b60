import { plannedOnce, type Queryable, type Row } from './db.js';

export type LeasedTable = 'fleets' | 'instances' | 'runs' | 'gateways';

/**
 * Claims up to `limit` due rows that nobody holds (or whose lease ran out), skipping rows another
 * transaction is claiming right now, so any number of servers can share one database. Rows falling
 * due within `aheadMs` are claimed too, so that rows due one after another are claimed together. With
 * `dueWhenLeaseEnds` (a controller that holds its rows between looks), a claimed row falls due when its lease runs out.
 * `columns`: those of the claimed rows it returns (a SELECT list).
 */
export async function claimDue(db: Queryable, table: LeasedTable, owner: string, leaseMs: number, limit: number, where: string, aheadMs = 0, dueWhenLeaseEnds = false, columns = '*'): Promise<Row[]> {
  return db.query(
    `UPDATE ${table} SET lease_owner = $1, lease_expires_at = now() + $2 * interval '1 millisecond'
       ${dueWhenLeaseEnds ? `, next_reconcile_at = now() + $2 * interval '1 millisecond'` : ''}
     WHERE id IN (
       SELECT id FROM ${table}
       WHERE next_reconcile_at <= now() + $4 * interval '1 millisecond' AND (lease_owner IS NULL OR lease_expires_at < now()) AND (${where})
       ORDER BY next_reconcile_at LIMIT $3 FOR UPDATE SKIP LOCKED)
     RETURNING ${columns}`,
    [owner, leaseMs, limit, aheadMs]);
}

/**
 * In how many milliseconds the earliest row that nobody holds falls due; null when there is none. Asked after the
 * claimed rows' reconciles have started, apart from the claim: folded into the claim's statement, it delayed every
 * reconcile (apply → running took 8 ms longer on PGlite).
 */
export async function nextDueInMs(db: Queryable, table: LeasedTable, where: string): Promise<number | null> {
  const [next] = await db.query<{ ms: number | null }>(
    `SELECT (EXTRACT(EPOCH FROM min(next_reconcile_at) - now()) * 1000)::float8 AS ms FROM ${table}
     WHERE lease_owner IS NULL AND (${where})`);
  return next?.ms ?? null;
}

/** Gives the row back and says when it wants its next look; a no-op when the lease was lost. */
export async function releaseLease(db: Queryable, table: LeasedTable, id: string, owner: string, nextInMs: number): Promise<void> {
  await db.query(plannedOnce(
    `UPDATE ${table} SET lease_owner = NULL, lease_expires_at = NULL,
       next_reconcile_at = now() + $3 * interval '1 millisecond'
     WHERE id = $1 AND lease_owner = $2`),
    [id, owner, nextInMs]);
}

/**
 * As releaseLease for many rows in one statement, each with its own delay. A row another transaction holds locked is
 * skipped, not waited for: the statement locking its rows in its own order while a transaction (the scheduler's
 * placement, a run's end) locked some of them in another made a deadlock, and PostgreSQL aborted the statement, which
 * left every row of the batch leased until its lease ran out. Returns the ids so skipped, still ours: give them back
 * again once that transaction has ended.
 */
export async function releaseLeases(db: Queryable, table: LeasedTable, owner: string, releases: ReadonlyArray<{ id: string; nextInMs: number }>): Promise<string[]> {
  const skipped = await db.query<{ id: string }>(
    `WITH r AS (SELECT * FROM unnest($2::text[], $3::float8[]) AS r(id, ms)),
     ours AS (SELECT t.id FROM ${table} t JOIN r ON r.id = t.id WHERE t.lease_owner = $1),
     free AS (SELECT t.id FROM ${table} t JOIN ours o ON o.id = t.id FOR UPDATE OF t SKIP LOCKED),
     released AS (
       UPDATE ${table} t SET lease_owner = NULL, lease_expires_at = NULL,
         next_reconcile_at = now() + r.ms * interval '1 millisecond'
       FROM r JOIN free f ON f.id = r.id
       WHERE t.id = r.id AND t.lease_owner = $1
       RETURNING t.id)
     SELECT id FROM ours WHERE id NOT IN (SELECT id FROM released)`,
    [owner, releases.map((r) => r.id), releases.map((r) => r.nextInMs)]);
  return skipped.map((row) => row.id);
}

/**
 * Reads again rows this server kept leased between reconciles, extending the lease of those in `renew`: a read, not a
 * write, for the others; a renewed row falls due when its lease runs out, as a claimed one of the watch does
 * (store/run-watch.ts). Rows whose lease went to another server are left out; `still_held` says whether a row still
 * matches `where` (a run that ended is no longer watched), else its lease is to be given back. `columns`: those the
 * controller reads (a SELECT list).
 */
export async function readHeldLeases(db: Queryable, table: LeasedTable, owner: string, ids: readonly string[], renew: readonly string[], leaseMs: number, where: string, columns = '*'): Promise<Array<Row & { still_held: boolean }>> {
  return db.query(
    `WITH renewed AS (
       UPDATE ${table} SET lease_expires_at = now() + $3 * interval '1 millisecond', next_reconcile_at = now() + $3 * interval '1 millisecond'
       WHERE id = ANY($2::text[]) AND lease_owner = $1 RETURNING ${columns}, (${where}) AS still_held),
     kept AS (SELECT ${columns}, (${where}) AS still_held FROM ${table} WHERE id = ANY($4::text[]) AND NOT id = ANY($2::text[]) AND lease_owner = $1)
     SELECT * FROM renewed UNION ALL SELECT * FROM kept`,
    [owner, renew, leaseMs, ids]);
}

/**
 * The rows `owner` holds whose next look someone asked for now (a stop request sets `next_reconcile_at`): a row held
 * between looks is otherwise due when its lease runs out.
 */
export async function heldRowsMadeDue(db: Queryable, table: LeasedTable, owner: string, where: string): Promise<string[]> {
  const rows = await db.query<{ id: string }>(
    `SELECT id FROM ${table} WHERE lease_owner = $1 AND next_reconcile_at <= now() AND (${where})`, [owner]);
  return rows.map((row) => row.id);
}

/**
 * Gives back every row `owner` holds (every row anyone holds, with null), each due now at the latest: a row held between
 * looks is due when its lease runs out.
 */
export async function releaseAllLeases(db: Queryable, owner: string | null): Promise<void> {
  for (const table of ['fleets', 'instances', 'runs', 'gateways'] as const) {
    await db.query(`UPDATE ${table} SET lease_owner = NULL, lease_expires_at = NULL, next_reconcile_at = least(next_reconcile_at, now())
      WHERE lease_owner IS NOT NULL AND ($1::text IS NULL OR lease_owner = $1)`, [owner]);
  }
}

/** Writes the changes only while `owner` still holds the row's lease; false when it lost it. */
export async function updateLeased<Column extends string>(db: Queryable, table: LeasedTable, id: string, owner: string, patch: Partial<Record<Column, unknown>>): Promise<boolean> {
  const params: unknown[] = [id, owner];
  const rows = await db.query(
    plannedOnce(`UPDATE ${table} SET ${assignments(patch, params).join(', ')}, updated_at = now() WHERE id = $1 AND lease_owner = $2 RETURNING id`),
    params);
  return rows.length > 0;
}

/** A patch as SQL assignments (`column = $n`), each value pushed onto `params`, which numbers it. */
export function assignments(patch: Partial<Record<string, unknown>>, params: unknown[]): string[] {
  return Object.entries(patch).map(([column, value]) => `${column} = $${params.push(value)}`);
}
