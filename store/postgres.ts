import postgres from 'postgres';
import type { Db, Queryable, Row } from './db.js';

export function openPostgres(url: string, options: { max?: number } = {}): Db {
  const sql = postgres(url, {
    max: options.max ?? 10,
    onnotice: () => {},
    types: { bigint: { to: 20, from: [20], serialize: (v: number) => String(v), parse: (v: string) => Number(v) } },
  });
  // Prepared: each connection parses a statement's text once, and later runs of it skip the round trip that an
  // unprepared statement with parameters spends describing them first. The texts are a bounded set (no values in them).
  const queryable = (runner: postgres.Sql | postgres.TransactionSql): Queryable => ({
    query: async <T extends Row>(text: string, params: unknown[] = []) =>
      (await runner.unsafe(text, params as postgres.ParameterOrJSON<never>[], { prepare: true })) as unknown as T[],
  });
  return {
    driver: 'postgres',
    ...queryable(sql),
    exec: async (text) => { await sql.unsafe(text); },
    transaction: (fn) => sql.begin((tx) => fn(queryable(tx))) as Promise<never>,
    listen: async (channel, onNotify) => {
      const { unlisten } = await sql.listen(channel, onNotify);
      return unlisten;
    },
    notify: async (channel, payload = '') => { await sql.notify(channel, payload); },
    close: () => sql.end({ timeout: 5 }),
  };
}
