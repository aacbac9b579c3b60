import type { LogLine } from '../api/objects.js';
import type { Queryable } from './db.js';

/** Stores lines copied from an agent; a line seen twice (a retry after a crash) is kept once. */
export async function appendLogs(db: Queryable, runId: string, lines: LogLine[]): Promise<void> {
  if (lines.length === 0) return;
  await db.query(
    `INSERT INTO logs (run_id, seq, ts, stream, text)
     SELECT $1, l.seq, l.ts, l.stream, l.text
     FROM jsonb_to_recordset($2::jsonb) AS l(seq integer, ts timestamptz, stream text, text text)
     ON CONFLICT (run_id, seq) DO NOTHING`,
    [runId, lines]);
}

export async function readLogs(db: Queryable, runId: string, after: number, limit = 5000): Promise<LogLine[]> {
  const rows = await db.query('SELECT seq, ts, stream, text FROM logs WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3', [runId, after, limit]);
  return rows.map((r) => ({ seq: r.seq, ts: r.ts.toISOString(), stream: r.stream, text: r.text }));
}

export async function lastLogSeq(db: Queryable, runId: string): Promise<number> {
  const [row] = await db.query('SELECT coalesce(max(seq), 0)::int AS seq FROM logs WHERE run_id = $1', [runId]);
  return row.seq;
}
