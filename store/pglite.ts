import { PGlite, type Transaction } from '@electric-sql/pglite';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { nodeCommandFor } from '../agent/launch.js';
import { lockDataDir } from './data-dir-lock.js';
import type { Db, Queryable, Row } from './db.js';
import { KeptStatements } from './pglite-statements.js';
import { PriorityGate } from './query-priority.js';

/**
 * Settings the embedded database starts with, over initdb's: shared buffers are taken from the process's memory
 * at start whether used or not, and initdb's 128 MB would make most of the server's footprint (bench/README.md).
 * Statements are kept parsed (store/pglite-statements.ts) but planned at each run with its values, as before: the
 * embedded database is never analysed, and the generic plans PostgreSQL chose from its default estimates made the
 * run list and the climb to 10 000 runs slower (bench/README.md, "Statements kept parsed"). Those marked `plannedOnce`
 * (store/db.ts) switch the session to generic plans while they run.
 */
const STARTUP_SETTINGS = ['shared_buffers=16MB', 'plan_cache_mode=force_custom_plan'];

/** A `VACUUM` of one table and nothing else: it changes neither the schema nor the session's settings, so kept statements stay. */
const MAINTENANCE = /^\s*VACUUM\s+[\w."]+\s*$/i;

/** The data directory holds files but no database: something else's folder, which a new database must not be mixed into. */
export class DataDirWithoutDatabaseError extends Error {
  constructor(readonly dataDir: string) {
    super(`${dataDir} holds files but no database (no PG_VERSION); move it away, or use --server-dir / ORCHESTRATOR_DATABASE_URL`);
    this.name = 'DataDirWithoutDatabaseError';
  }
}

/**
 * The embedded database: a PGlite data directory, or memory when dataDir is undefined. One process at a time may
 * open a directory (a DataDirInUseError says which holds it): PGlite has no locking of its own, and two at once corrupt it.
 * `settings` (`name=value`) are for measuring others (bench/embedded.ts).
 */
export async function openPglite(dataDir?: string, settings = STARTUP_SETTINGS): Promise<Db> {
  if (dataDir) mkdirSync(dirname(dataDir), { recursive: true });
  const unlock = dataDir ? lockDataDir(dataDir) : () => undefined;
  const pg = await (async () => {
    if (dataDir && !existsSync(join(dataDir, 'PG_VERSION'))) await initialiseApart(dataDir);
    return PGlite.create(dataDir, { startParams: [...PGlite.defaultStartParams, ...settings.flatMap((s) => ['-c', s])] });
  })().catch((error: unknown) => {
    unlock();
    throw error;
  });
  // A notification that comes with a kept statement's answer is dispatched here; one that comes with PGlite's own
  // statements (a transaction's COMMIT, `exec`) by PGlite, to the same listeners.
  const listeners = new Map<string, Set<(payload: string) => void>>();
  const statements = new KeptStatements(pg, ({ channel, payload }) => {
    for (const onNotify of listeners.get(channel) ?? []) queueMicrotask(() => onNotify(payload));
  });
  const inTransaction = (tx: Transaction): Queryable => ({
    query: async <T extends Row>(text: string, params: unknown[] = []) => {
      if (tx.closed) throw new Error('Transaction is closed');
      return statements.query<T>(text, params, true);
    },
  });
  // PGlite runs one statement at a time in arrival order; the gate picks which goes next instead.
  const gate = new PriorityGate();
  return {
    driver: 'pglite',
    query: (text, params = []) => gate.run(() => statements.query(text, params, false)),
    exec: (text) => gate.run(async () => {
      try {
        await pg.exec(text);
      } finally {
        if (!MAINTENANCE.test(text)) {
          statements.forget();
          statements.forgetPlanMode();
        }
      }
    }),
    transaction: (fn) => gate.run(() => pg.transaction((tx) => fn(inTransaction(tx))).catch((error: unknown) => {
      statements.forgetPlanMode();
      throw error;
    })),
    listen: async (channel, onNotify) => {
      const unlisten = await pg.listen(channel, onNotify);
      if (!listeners.has(channel)) listeners.set(channel, new Set());
      listeners.get(channel)!.add(onNotify);
      return async () => {
        listeners.get(channel)?.delete(onNotify);
        await unlisten();
      };
    },
    notify: (channel, payload = '') => gate.run(async () => { await statements.query('SELECT pg_notify($1, $2)', [channel, payload], false); }),
    close: async () => {
      await pg.close();
      unlock();
    },
  };
}

/**
 * Makes the data directory in a process of its own (store/pglite-initdb.ts says why), beside it, and moves it into
 * place once complete: a server killed meanwhile leaves no half-made directory that would pass for a database.
 */
async function initialiseApart(dataDir: string): Promise<void> {
  try {
    rmdirSync(dataDir);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOTEMPTY') throw new DataDirWithoutDatabaseError(dataDir);
    if (code !== 'ENOENT') throw error;
  }
  const making = `${dataDir}.initdb`;
  rmSync(making, { recursive: true, force: true });
  const { command, args } = nodeCommandFor(new URL('./pglite-initdb.js', import.meta.url), new URL('./pglite-initdb.ts', import.meta.url));
  const child = spawn(command, [...args, making], { stdio: ['ignore', 'ignore', 'pipe', 'ipc'] });
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (text: string) => { stderr += text; });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', resolve);
  });
  if (code !== 0) throw new Error(`initialising the embedded database in ${dataDir} failed (exit ${code}): ${stderr.trim()}`);
  renameSync(making, dataDir);
}
