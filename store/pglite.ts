import { PGlite, type Transaction } from '@electric-sql/pglite';
import { mkdirSync } from 'node:fs';
import { lockDataDir } from './data-dir-lock.js';
import type { Db, Queryable, Row } from './db.js';

/**
 * The embedded database: a PGlite data directory, or memory when dataDir is undefined. One process at a time may
 * open a directory (a DataDirInUseError says which holds it): PGlite has no locking of its own, and two at once corrupt it.
 */
export async function openPglite(dataDir?: string): Promise<Db> {
  if (dataDir) mkdirSync(dataDir, { recursive: true });
  const unlock = dataDir ? lockDataDir(dataDir) : () => undefined;
  const pg = await PGlite.create(dataDir).catch((error: unknown) => {
    unlock();
    throw error;
  });
  const queryable = (runner: PGlite | Transaction): Queryable => ({
    query: async <T extends Row>(text: string, params: unknown[] = []) =>
      (await runner.query<T>(text, params)).rows,
  });
  return {
    driver: 'pglite',
    ...queryable(pg),
    exec: async (text) => { await pg.exec(text); },
    transaction: (fn) => pg.transaction((tx) => fn(queryable(tx))),
    listen: (channel, onNotify) => pg.listen(channel, onNotify),
    notify: async (channel, payload = '') => { await pg.query('SELECT pg_notify($1, $2)', [channel, payload]); },
    close: async () => {
      await pg.close();
      unlock();
    },
  };
}
