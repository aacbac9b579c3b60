import type { Db, Queryable } from './db.js';

/** autovacuum_vacuum_threshold and autovacuum_vacuum_scale_factor as PostgreSQL ships them. */
const DEAD_ROWS_THRESHOLD = 50;
const DEAD_ROWS_SCALE = 0.2;

/**
 * The tables that autovacuum's own rule would vacuum now: more dead row versions than 50 plus a fifth of the live
 * rows, the deadest first; each named as VACUUM takes it (quoted).
 */
export async function tablesDueForVacuum(db: Queryable): Promise<string[]> {
  // A session's table statistics reach the views when flushed, which the embedded database's one session leaves to
  // the end of its next statement.
  await db.query('SELECT pg_stat_force_next_flush()');
  const rows = await db.query<{ name: string }>(
    `SELECT format('%I.%I', schemaname, relname) AS name FROM pg_stat_user_tables
     WHERE n_dead_tup > $1::float8 + $2::float8 * n_live_tup ORDER BY n_dead_tup DESC`, [DEAD_ROWS_THRESHOLD, DEAD_ROWS_SCALE]);
  return rows.map((row) => row.name);
}

/** `table` as tablesDueForVacuum names it. */
export async function vacuum(db: Db, table: string): Promise<void> {
  await db.exec(`VACUUM ${table}`);
}
