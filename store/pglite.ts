import { types, type ParserOptions, type SerializerOptions } from '@electric-sql/pglite';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { nodeCommandFor } from '../agent/launch.js';
import { lockDataDir } from './data-dir-lock.js';
import type { Db } from './db.js';
import { KeptStatements } from './pglite-statements.js';
import { PgliteThread } from './pglite-thread.js';
import { gatedHandles, PriorityGate } from './query-priority.js';

/**
 * Settings the embedded database starts with, over initdb's: shared buffers are taken from the process's memory
 * at start whether used or not, and initdb's 128 MB would make most of the server's footprint (bench/README.md).
 * Statements are kept parsed (store/pglite-statements.ts) but planned at each run with its values, as before: the
 * embedded database is never analysed, and the generic plans PostgreSQL chose from its default estimates made the
 * run list and the climb to 10 000 runs slower (bench/README.md, "Statements kept parsed"). Those marked `plannedOnce`
 * (store/db.ts) switch the session to generic plans while they run.
 */
const STARTUP_SETTINGS = ['shared_buffers=16MB', 'plan_cache_mode=force_custom_plan'];

/** How many statements (or transactions) may be sent to the database's thread before their answers are read. */
const SENT_AHEAD = 4;

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
  const thread = await (async () => {
    if (dataDir && !existsSync(join(dataDir, 'PG_VERSION'))) await initialiseApart(dataDir);
    return PgliteThread.start({ dataDir, settings });
  })().catch((error: unknown) => {
    unlock();
    throw error;
  });
  // Every notification comes with the answer to some statement, and is dispatched from there.
  const listeners = new Map<string, Set<(payload: string) => void>>();
  const typeMaps = { serializers: { ...types.serializers }, parsers: { ...types.parsers } };
  const statements = new KeptStatements(thread, typeMaps, ({ channel, payload }) => {
    for (const onNotify of listeners.get(channel) ?? []) queueMicrotask(() => onNotify(payload));
  });
  await addArrayTypes(statements, typeMaps);
  // The database's thread runs statements in the order they are sent. A few are sent ahead, so that it has the next
  // while this thread reads an answer; the gate picks which (requests' first) and keeps a place for a request.
  const gate = new PriorityGate(SENT_AHEAD, SENT_AHEAD - 1);
  return gatedHandles(gate, (run) => ({
    driver: 'pglite',
    query: (text, params = []) => run(() => statements.query(text, params)),
    exec: (text) => run(async () => {
      try {
        await statements.simple(text, true);
      } finally {
        if (!MAINTENANCE.test(text)) {
          statements.forget();
          statements.forgetPlanMode();
        }
      }
    }),
    transaction: (fn) => run(() => statements.transaction(fn)),
    listen: async (channel, onNotify) => {
      let listening = listeners.get(channel);
      if (!listening) {
        listening = new Set();
        listeners.set(channel, listening);
        await run(() => statements.simple(`LISTEN ${quoted(channel)}`, true));
      }
      listening.add(onNotify);
      return async () => {
        listening.delete(onNotify);
        if (listening.size > 0 || listeners.get(channel) !== listening) return;
        listeners.delete(channel);
        await run(() => statements.simple(`UNLISTEN ${quoted(channel)}`, true));
      };
    },
    notify: (channel, payload = '') => run(async () => { await statements.query('SELECT pg_notify($1, $2)', [channel, payload]); }),
    close: async () => {
      await thread.close();
      unlock();
    },
  }));
}

/** Array types' serializers and parsers by oid, made from their element types' as PGlite makes its own. */
async function addArrayTypes(statements: KeptStatements, typeMaps: { serializers: SerializerOptions; parsers: ParserOptions }): Promise<void> {
  const arrays = await statements.query<{ oid: number; typarray: number }>(
    `SELECT b.oid, b.typarray FROM pg_catalog.pg_type a LEFT JOIN pg_catalog.pg_type b ON b.oid = a.typelem
     WHERE a.typcategory = 'A' GROUP BY b.oid, b.typarray ORDER BY b.oid`, []);
  for (const { oid, typarray } of arrays) {
    typeMaps.serializers[typarray] = (value) => types.arraySerializer(value, typeMaps.serializers[oid], typarray);
    typeMaps.parsers[typarray] = (value) => types.arrayParser(value, typeMaps.parsers[oid], typarray);
  }
}

function quoted(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`;
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
