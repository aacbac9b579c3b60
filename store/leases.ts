import type { Queryable, Row } from './db.js';

export type LeasedTable = 'fleets' | 'instances' | 'runs' | 'gateways';

/** What one claim took, and in how many milliseconds the earliest row it left (nobody holds) falls due; null: none. */
export interface Claim {
  rows: Row[];
  nextDueInMs: number | null;
}

/**
 * Claims up to `limit` due rows that nobody holds (or whose lease ran out), skipping rows another
 * transaction is claiming right now, so any number of servers can share one database. Rows falling
 * due within `aheadMs` are claimed too, so that rows due one after another are claimed together.
 * The same statement says when the earliest row left falls due, so a pass costs one round trip.
 */
export async function claimDue(db: Queryable, table: LeasedTable, owner: string, leaseMs: number, limit: number, where: string, aheadMs = 0): Promise<Claim> {
  const answer = await db.query<Row & { next_due_in_ms: number | null }>(
    `WITH claimed AS (
       UPDATE ${table} SET lease_owner = $1, lease_expires_at = now() + $2 * interval '1 millisecond'
       WHERE id IN (
         SELECT id FROM ${table}
         WHERE next_reconcile_at <= now() + $4 * interval '1 millisecond' AND (lease_owner IS NULL OR lease_expires_at < now()) AND (${where})
         ORDER BY next_reconcile_at LIMIT $3 FOR UPDATE SKIP LOCKED)
       RETURNING *),
     left_due AS (
       SELECT (EXTRACT(EPOCH FROM min(next_reconcile_at) - now()) * 1000)::float8 AS next_due_in_ms FROM ${table}
       WHERE lease_owner IS NULL AND (${where}) AND id NOT IN (SELECT id FROM claimed))
     SELECT claimed.*, left_due.next_due_in_ms FROM left_due LEFT JOIN claimed ON true`,
    [owner, leaseMs, limit, aheadMs]);
  const rows: Row[] = [];
  for (const { next_due_in_ms: _next, ...row } of answer) if (row.id !== null) rows.push(row);
  return { rows, nextDueInMs: answer[0]?.next_due_in_ms ?? null };
}

/** Gives the row back and says when it wants its next look; a no-op when the lease was lost. */
export async function releaseLease(db: Queryable, table: LeasedTable, id: string, owner: string, nextInMs: number): Promise<void> {
  await db.query(
    `UPDATE ${table} SET lease_owner = NULL, lease_expires_at = NULL,
       next_reconcile_at = now() + $3 * interval '1 millisecond'
     WHERE id = $1 AND lease_owner = $2`,
    [id, owner, nextInMs]);
}

export async function releaseAllLeases(db: Queryable, owner: string): Promise<void> {
  for (const table of ['fleets', 'instances', 'runs', 'gateways'] as const) {
    await db.query(`UPDATE ${table} SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = $1`, [owner]);
  }
}

/** Makes a row due now, so the next pass (or the nudge) picks it up. */
export async function markDue(db: Queryable, table: LeasedTable, id: string): Promise<void> {
  await db.query(`UPDATE ${table} SET next_reconcile_at = now() WHERE id = $1`, [id]);
}

/** Writes the changes only while `owner` still holds the row's lease; false when it lost it. */
export async function updateLeased<Column extends string>(db: Queryable, table: LeasedTable, id: string, owner: string, patch: Partial<Record<Column, unknown>>): Promise<boolean> {
  const columns = Object.keys(patch) as Column[];
  const sets = columns.map((c, i) => `${c} = $${i + 3}`).join(', ');
  const rows = await db.query(
    `UPDATE ${table} SET ${sets}, updated_at = now() WHERE id = $1 AND lease_owner = $2 RETURNING id`,
    [id, owner, ...columns.map((c) => patch[c])]);
  return rows.length > 0;
}
