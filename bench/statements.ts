/**
 * What one statement costs on the embedded database, kept parsed (store/pglite-statements.ts) and through PGlite's own
 * `query` (the reference, as the server ran them before), in the same process:
 *
 *   npm run bench:statements
 *
 * Two in-memory databases, migrated alike and holding 2 000 running jobs that another server holds and 20 runs
 * provisioning, run the same store functions in turn: a run read by id, the start loop's claim finding nothing due, a
 * step written under the lease, a NOTIFY, the run list of `ps` (1 000 rows), and a transaction of a read and a write.
 * Each prints the median wall time and the server thread's CPU a statement, beside the reference's.
 */
import { PGlite, type Transaction } from '@electric-sql/pglite';
import type { Db, Queryable, Row } from '../store/db.js';
import { claimDue, updateLeased } from '../store/leases.js';
import { migrate } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { getProject } from '../store/projects.js';
import { listRunViews } from '../store/run-views.js';
import { getRun } from '../store/runs.js';
import { median } from './quantiles.js';
import { runCopier } from './run-copies.js';

const ROUNDS = 5;
const CALLS = 400;
/** A statement that reads a thousand rows, timed over fewer calls. */
const RUN_LIST = 'the run list, 1 000 of its live runs (listRunViews, as `ps`)';
const RUN_LIST_CALLS = 20;

/** The embedded database as the server opened it before statements were kept: every statement through PGlite's `query`. */
async function throughPgliteQuery(): Promise<Db> {
  const pg = await PGlite.create(undefined, { startParams: [...PGlite.defaultStartParams, '-c', 'shared_buffers=16MB'] });
  const queryable = (runner: PGlite | Transaction): Queryable => ({
    query: async <T extends Row>(text: string, params: unknown[] = []) => (await runner.query<T>(text, params)).rows,
  });
  const db: Db = {
    driver: 'pglite',
    query: queryable(pg).query,
    exec: async (text) => { await pg.exec(text); },
    transaction: (fn) => pg.transaction((tx) => fn(queryable(tx))),
    listen: (channel, onNotify) => pg.listen(channel, onNotify),
    notify: async (channel, payload = '') => { await pg.query('SELECT pg_notify($1, $2)', [channel, payload]); },
    close: () => pg.close(),
    // No gate, so no priority either.
    get background() { return db; },
  };
  return db;
}

/** Fills a database alike, and answers the statements to time on it. */
async function prepared(db: Db): Promise<Record<string, (i: number) => Promise<unknown>>> {
  await migrate(db);
  const copies = await runCopier(db);
  await copies(2_000, 'held-', { status: 'running', lease_owner: 'bench', lease_expires_at: new Date(Date.now() + 3_600_000), next_reconcile_at: new Date(Date.now() + 3_600_000) });
  await copies(20, 'provisioning-', { status: 'provisioning', next_reconcile_at: new Date(Date.now() + 3_600_000) });
  const held = (i: number) => `held-${1 + (i % 2_000)}`;
  const project = (await getProject(db, 'main'))!;
  return {
    'a run read by id (getRun)': (i) => getRun(db, held(i)),
    'the start loop\'s claim, nothing due (claimDue)': () => claimDue(db, 'runs', 'bench', 15_000, 64, `status = 'provisioning'`),
    'a step written under the lease (updateLeased)': (i) => updateLeased(db, 'runs', held(i), 'bench', { status_message: `look ${i}` }),
    'a NOTIFY (notify)': () => db.notify('bench', 'x'),
    [RUN_LIST]: () => listRunViews(db, project.id, false),
    'a transaction: a run read, then written': (i) => db.transaction(async (tx) => {
      await getRun(tx, held(i));
      await updateLeased(tx, 'runs', held(i), 'bench', { status_message: `step ${i}` });
    }),
  };
}

interface Figure { wallUs: number; cpuUs: number }

/** A statement's wall and CPU time a call, over `calls` calls after a few to warm up. */
async function timed(statement: (i: number) => Promise<unknown>, calls: number): Promise<Figure> {
  for (let i = 0; i < Math.min(50, calls); i++) await statement(i);
  const cpu = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < calls; i++) await statement(i);
  const used = process.cpuUsage(cpu);
  return { wallUs: (performance.now() - started) * 1000 / calls, cpuUs: (used.user + used.system) / calls };
}

const kept = await openPglite();
const reference = await throughPgliteQuery();
try {
  console.log(`# one statement on the embedded database: kept parsed, against PGlite's own query (the reference), same process`);
  const statements = { kept: await prepared(kept), reference: await prepared(reference) };
  for (const name of Object.keys(statements.kept)) {
    const figures = { kept: [] as Figure[], reference: [] as Figure[] };
    const calls = name === RUN_LIST ? RUN_LIST_CALLS : CALLS;
    for (let round = 0; round < ROUNDS; round++) {
      figures.kept.push(await timed(statements.kept[name]!, calls));
      figures.reference.push(await timed(statements.reference[name]!, calls));
    }
    const [wall, cpu] = (['wallUs', 'cpuUs'] as const).map((field) => ({
      kept: median(figures.kept.map((f) => f[field])), reference: median(figures.reference.map((f) => f[field])),
    }));
    console.log(`${name}, median of ${ROUNDS} rounds of ${calls}: ${wall!.kept.toFixed(0)} µs (CPU ${cpu!.kept.toFixed(0)} µs); `
      + `reference ${wall!.reference.toFixed(0)} µs (CPU ${cpu!.reference.toFixed(0)} µs); ratio ${(wall!.reference / wall!.kept).toFixed(1)}x`);
  }
} finally {
  await kept.close();
  await reference.close();
}
