/**
 * Where a steady scheduling pass over 10 000 queued runs spends its time: each statement's count and time within
 * the pass, what is left for JavaScript, and the queue's read split into the engine's own time (EXPLAIN ANALYZE),
 * the ids alone, the queue's order as the scheduler reads it (`queueOrder`), and the whole rows as it read them before.
 *
 *   node dist/bench/scheduler-profile.js               # in-memory PGlite, opened as the server opens it
 *   node dist/bench/scheduler-profile.js --postgres    # a scratch database on the local PostgreSQL
 */
import { normalizeResources } from '../api/resources.js';
import { BackendPool } from '../controllers/backend-pool.js';
import { Scheduler } from '../controllers/scheduler.js';
import type { Db, Queryable } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { openDatabase } from '../store/open.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { queueOrder } from '../store/run-queue.js';
import { insertRun } from '../store/runs.js';
import { createScratchDatabase } from '../test/helpers/databases.js';
import { median } from './quantiles.js';

const QUEUED = 10_000;
const PASSES = 5;
const QUEUE_READ = `SELECT id, project_id, name, kind, replica, requirement, desired, status_message, spec, coalesce(first_submitted_at, submitted_at) AS first_submitted_at
  FROM runs WHERE status = 'submitted' AND NOT deleted AND next_reconcile_at <= now() ORDER BY priority DESC, submitted_at, id`;

const scratch = process.argv.includes('--postgres') ? await createScratchDatabase() : null;
const db = await openDatabase({ url: scratch?.url });
try {
  const project = await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }]);
  const user = await upsertUser(db, 'bench', 'bench-token', 'admin');
  await applyFleet(db, project.id, { name: 'full', spec: {}, requirement: normalizeResources(undefined, 'fleet'), nodesMin: 0, nodesMax: 0, idleSeconds: null, backends: ['local'] });
  const requirement = normalizeResources(undefined, 'run');
  await db.transaction(async (tx) => {
    for (let i = 0; i < QUEUED; i++) await insertRun(tx, { projectId: project.id, userId: user.id, name: `q${i}`, kind: 'task', spec: { type: 'task', commands: ['true'] }, files: [], requirement, priority: i % 3 });
  });

  let statements = new Map<string, { count: number; ms: number }>();
  const timed = (runner: Queryable): Queryable => ({
    query: async (sql, params) => {
      const t0 = performance.now();
      try {
        return await runner.query(sql, params);
      } finally {
        const key = sql.replace(/\s+/g, ' ').trim().slice(0, 100);
        const entry = statements.get(key) ?? { count: 0, ms: 0 };
        entry.count++;
        entry.ms += performance.now() - t0;
        statements.set(key, entry);
      }
    },
  });
  const traced: Db = { ...db, ...timed(db), transaction: (fn) => db.transaction((tx) => fn(timed(tx))) };
  const scheduler = new Scheduler(traced, new BackendPool(traced, '/nonexistent-backends'));
  await scheduler.pass();
  const passes: { ms: number; statements: typeof statements }[] = [];
  for (let i = 0; i < PASSES; i++) {
    statements = new Map();
    const t0 = performance.now();
    await scheduler.pass();
    passes.push({ ms: performance.now() - t0, statements });
  }
  passes.sort((a, b) => a.ms - b.ms);
  const typical = passes[Math.floor(PASSES / 2)];
  console.log(`# steady scheduling pass over ${QUEUED} queued runs (${db.driver}): median of ${PASSES} ${typical.ms.toFixed(0)} ms`);
  let inStatements = 0;
  for (const [sql, { count, ms }] of [...typical.statements].sort((a, b) => b[1].ms - a[1].ms)) {
    inStatements += ms;
    console.log(`  ${count} × ${ms.toFixed(1)} ms  ${sql}`);
  }
  console.log(`  the rest (JavaScript: placing each run, the pool): ${(typical.ms - inStatements).toFixed(0)} ms`);

  const medianTime = async (work: () => Promise<unknown>) => {
    const times: number[] = [];
    for (let i = 0; i < PASSES; i++) {
      const t0 = performance.now();
      await work();
      times.push(performance.now() - t0);
    }
    return median(times);
  };
  const read = (sql: string) => medianTime(() => db.query(sql));
  const plan = await db.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${QUEUE_READ}`);
  const engineMs = (Object.values(plan[0])[0] as [{ 'Execution Time': number }])[0]['Execution Time'];
  const [{ bytes }] = await db.query<{ bytes: number }>('SELECT (sum(pg_column_size(spec)) + sum(pg_column_size(requirement)))::int AS bytes FROM runs');
  console.log(`# the queue's read, medians of ${PASSES}: its order as a pass reads it ${(await medianTime(() => queueOrder(db))).toFixed(0)} ms; whole rows (as passes read them before) ${(await read(QUEUE_READ)).toFixed(0)} ms; ids alone ${(await read(QUEUE_READ.replace(/SELECT [\s\S]* FROM runs/, 'SELECT id FROM runs'))).toFixed(0)} ms; in the engine (EXPLAIN ANALYZE) ${engineMs.toFixed(0)} ms; spec and requirement ${(bytes / 1024 / 1024).toFixed(1)} MB of JSON`);
} finally {
  await db.close();
  await scratch?.drop();
}
process.exit(0);
