import postgres from 'postgres';
import type { Db, Queryable, Row } from './db.js';
import { gatedHandles, PriorityGate } from './query-priority.js';

/** Connections that the controllers' statements leave to requests (store/query-priority.ts). */
const RESERVED_FOR_REQUESTS = 2;

export function openPostgres(url: string, options: { max?: number } = {}): Db {
  const max = options.max ?? 10;
  const sql = postgres(url, {
    max,
    onnotice: () => {},
    types: { bigint: { to: 20, from: [20], serialize: (v: number) => String(v), parse: (v: string) => Number(v) } },
  });
  // Prepared: each connection parses a statement's text once, and later runs of it skip the round trip that an
  // unprepared statement with parameters spends describing them first. The texts are a bounded set (no values in them).
  const queryable = (runner: postgres.Sql | postgres.TransactionSql): Queryable => ({
    query: async <T extends Row>(text: string, params: unknown[] = []) =>
      (await runner.unsafe(text, params as postgres.ParameterOrJSON<never>[], { prepare: true })) as unknown as T[],
  });
  // At most one statement per connection, so that postgres.js never pipelines a request's behind a controller's.
  const gate = new PriorityGate(max, Math.max(1, max - RESERVED_FOR_REQUESTS));
  const direct = queryable(sql);
  return gatedHandles(gate, (run) => ({
    driver: 'postgres',
    query: (text, params) => run(() => direct.query(text, params)),
    exec: (text) => run(async () => { await sql.unsafe(text); }),
    transaction: (fn) => run(() => sql.begin((tx) => fn(queryable(tx))) as Promise<never>),
    listen: async (channel, onNotify) => {
      const { unlisten } = await sql.listen(channel, onNotify);
      return unlisten;
    },
    notify: (channel, payload = '') => run(async () => { await sql.notify(channel, payload); }),
    close: () => sql.end({ timeout: 5 }),
  }));
}
