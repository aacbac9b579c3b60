import type { Queryable } from './db.js';

/** When each run was submitted, in Unix seconds: the `created` of the models the gateway lists. */
export async function runsCreatedAt(db: Queryable, runIds: string[]): Promise<Map<string, number>> {
  if (runIds.length === 0) return new Map();
  const rows = await db.query<{ id: string; submitted_at: Date }>(`SELECT id, submitted_at FROM runs WHERE id = ANY($1::text[])`, [runIds]);
  return new Map(rows.map((row) => [row.id, Math.floor(new Date(row.submitted_at).getTime() / 1000)]));
}
