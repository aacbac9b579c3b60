import type { Queryable, Row } from './db.js';

/**
 * Claims, as claimDue does, up to `limit` due runs (their `columns`), and with them the runs of the same instances that fall due within
 * `siblingsAheadMs`: a look a little early changes nothing, and after one look together an instance's runs fall due
 * together, so each later look at them is one agent call and one batch of statements. Due runs come first.
 * A claimed run falls due when its lease runs out: the watch keeps it leased between looks (controllers/leased.ts,
 * `holding`), and its claims then walk the due index past no run held by a live server.
 */
export async function claimWatchedRuns(db: Queryable, owner: string, leaseMs: number, limit: number, where: string, aheadMs: number, siblingsAheadMs: number, columns = '*'): Promise<Row[]> {
  const free = `(lease_owner IS NULL OR lease_expires_at < now()) AND (${where})`;
  return db.query(
    `UPDATE runs SET lease_owner = $1, lease_expires_at = now() + $2 * interval '1 millisecond',
       next_reconcile_at = now() + $2 * interval '1 millisecond'
     WHERE id IN (
       SELECT id FROM runs
       WHERE ${free} AND (next_reconcile_at <= now() + $4 * interval '1 millisecond'
         OR (next_reconcile_at <= now() + $5 * interval '1 millisecond' AND instance_id IN (
           SELECT instance_id FROM runs WHERE ${free} AND next_reconcile_at <= now() + $4 * interval '1 millisecond')))
       ORDER BY next_reconcile_at LIMIT $3 FOR UPDATE SKIP LOCKED)
     RETURNING ${columns}`,
    [owner, leaseMs, limit, aheadMs, siblingsAheadMs]);
}
