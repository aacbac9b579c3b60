/**
 * The watch's claim as the embedded database ages, with and without its autovacuum (controllers/embedded-vacuum.ts):
 *
 *   npm run bench:vacuum [-- --runs 50 --looks 100000]
 *
 * Two in-memory PGlite databases, each with the same running tasks, take the same looks (a look takes a run's lease
 * and gives it back, as the watch does: two updates of its `next_reconcile_at`); one of them is vacuumed by the
 * controller's rule after every 10 000 looks (10 s at 1 000 looks a second), the other never, as before. At each
 * checkpoint it prints the median time of the watch's claim (store/run-watch.ts#claimWatchedRuns, one run due) on each,
 * the due index's size, and what the vacuums cost.
 */
import { parseArgs } from 'node:util';
import winston from 'winston';
import { EmbeddedVacuum } from '../controllers/embedded-vacuum.js';
import type { Db } from '../store/db.js';
import { releaseLease } from '../store/leases.js';
import { openDatabase } from '../store/open.js';
import { claimWatchedRuns } from '../store/run-watch.js';
import { median } from './quantiles.js';
import { runCopier } from './run-copies.js';

const { values } = parseArgs({ options: { runs: { type: 'string', default: '50' }, looks: { type: 'string', default: '100000' } } });
const RUNS = Number(values.runs);
const LOOKS = Number(values.looks);
const LOOKS_BETWEEN_VACUUMS = 10_000;
const WATCHED = `status IN ('running', 'terminating')`;

async function opened(): Promise<Db> {
  const db = await openDatabase({});
  const copies = await runCopier(db);
  await copies(RUNS, 'watched-', { status: 'running', next_reconcile_at: new Date(Date.now() + 3_600_000) });
  return db;
}

/** Median of 21 claims of one due run, each given back for an hour. */
async function claimMedian(db: Db): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 21; i++) {
    await db.query(`UPDATE runs SET next_reconcile_at = now() - interval '1 second' WHERE id = 'watched-1'`);
    const started = performance.now();
    const claimed = await claimWatchedRuns(db, 'bench', 15_000, 64, WATCHED, 100, 1_000, 'id');
    times.push(performance.now() - started);
    for (const row of claimed) await releaseLease(db, 'runs', row.id as string, 'bench', 3_600_000);
  }
  return median(times);
}

const dueIndexPages = async (db: Db) => (await db.query<{ pages: number }>(`SELECT (pg_relation_size('runs_active_due') / 8192)::int AS pages`))[0].pages;

async function look(db: Db, n: number): Promise<void> {
  const id = `watched-${1 + (n % RUNS)}`;
  await db.query(`UPDATE runs SET lease_owner = 'bench', next_reconcile_at = now() + interval '15 seconds' WHERE id = $1`, [id]);
  await db.query(`UPDATE runs SET lease_owner = NULL, next_reconcile_at = now() + interval '1 hour' WHERE id = $1`, [id]);
}

const never = await opened();
const vacuumed = await opened();
const vacuums = new EmbeddedVacuum(vacuumed, winston.createLogger({ silent: true }), 0);
const vacuumMs: number[] = [];
try {
  console.log(`# the watch's claim beside ${RUNS} running tasks, as looks at them add up (PGlite)`);
  for (let done = 0; done <= LOOKS; done += LOOKS_BETWEEN_VACUUMS) {
    if (done > 0) {
      for (let n = done - LOOKS_BETWEEN_VACUUMS; n < done; n++) {
        await look(never, n);
        await look(vacuumed, n);
      }
      const started = performance.now();
      await vacuums.pass();
      vacuumMs.push(performance.now() - started);
    }
    const [withVacuum, without] = [await claimMedian(vacuumed), await claimMedian(never)];
    console.log(`after ${done} looks: claim ${withVacuum.toFixed(2)} ms with the autovacuum, ${without.toFixed(2)} ms without (ratio ${(without / withVacuum).toFixed(1)}x); due index ${await dueIndexPages(vacuumed)} / ${await dueIndexPages(never)} pages`);
  }
  console.log(`the autovacuum's passes, median ${median(vacuumMs).toFixed(1)} ms, max ${Math.max(...vacuumMs).toFixed(1)} ms (${vacuumMs.length})`);
} finally {
  await never.close();
  await vacuumed.close();
}
