import { expect } from 'chai';
import winston from 'winston';
import { runCopier } from '../bench/run-copies.js';
import { EmbeddedVacuum } from '../controllers/embedded-vacuum.js';
import type { Db } from '../store/db.js';
import { migrate } from '../store/migrations.js';
import { tablesDueForVacuum } from '../store/vacuum.js';
import { openScratchDb } from './helpers/databases.js';

/**
 * PGlite runs PostgreSQL without autovacuum: every update of a run's `next_reconcile_at` left a dead entry in the due
 * index for good, and the claims that read that index up to now read them all.
 */
describe('autovacuum for the embedded database', function () {
  this.timeout(60_000);
  let db: Db;
  let close: () => Promise<void>;
  const logger = winston.createLogger({ silent: true });

  before(async () => {
    ({ db, close } = await openScratchDb('pglite'));
    await migrate(db);
  });
  after(() => close());

  /** The entries the due index gives for the runs due within a second, dead ones included (a bitmap scan counts them). */
  async function dueIndexEntries(): Promise<number> {
    await db.exec('SET enable_seqscan = off; SET enable_indexscan = off');
    try {
      const [row] = await db.query(`EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM runs
        WHERE status IN ('running', 'terminating') AND next_reconcile_at <= now() + interval '1 second'`);
      const plan = row['QUERY PLAN'];
      const text = typeof plan === 'string' ? plan : JSON.stringify(plan);
      const scan = /"Index Name": ?"runs_active_due"[^}]*?"Actual Rows": ?([\d.]+)/.exec(text);
      expect(scan, text).to.not.equal(null);
      return Number(scan![1]);
    } finally {
      await db.exec('RESET enable_seqscan; RESET enable_indexscan');
    }
  }
  const vacuumCount = async (table: string) =>
    (await db.query<{ n: number }>(`SELECT pg_stat_get_vacuum_count($1::regclass)::int AS n`, [table]))[0].n;
  const keptStatements = async () =>
    (await db.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_prepared_statements'))[0].n;

  it('vacuums a table once its dead rows pass autovacuum\'s threshold, after which the due index holds only live entries', async () => {
    const copies = await runCopier(db);
    await copies(50, 'watched-', { status: 'running', next_reconcile_at: new Date(Date.now() - 1_000) });
    // 300 looks as the watch makes them: each takes the run's lease and gives it back, due again now.
    for (let look = 0; look < 300; look++) {
      const id = `watched-${1 + (look % 50)}`;
      await db.query(`UPDATE runs SET lease_owner = 'server', next_reconcile_at = now() WHERE id = $1`, [id]);
      await db.query(`UPDATE runs SET lease_owner = NULL, next_reconcile_at = now() WHERE id = $1`, [id]);
    }
    expect(await dueIndexEntries()).to.be.above(400);
    const due = await tablesDueForVacuum(db);
    expect(due).to.include('public.runs');
    expect(due).to.not.include('public.projects');

    const kept = await keptStatements();
    const vacuums = new EmbeddedVacuum(db, logger, 60_000);
    expect(await vacuums.pass()).to.equal(60_000);
    expect(await vacuumCount('runs')).to.equal(1);
    expect(await vacuumCount('projects')).to.equal(0);
    expect(await dueIndexEntries()).to.equal(50);
    expect(await tablesDueForVacuum(db)).to.not.include('public.runs');
    // VACUUM changes no schema: the statements kept parsed stay so.
    expect(await keptStatements()).to.be.at.least(kept);

    // The next look waits for its interval.
    const untilNext = await vacuums.pass();
    expect(untilNext).to.be.above(50_000).and.at.most(60_000);
    expect(await vacuumCount('runs')).to.equal(1);
  });
});
