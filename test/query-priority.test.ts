import { expect } from 'chai';
import type { Db } from '../store/db.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { createScratchDatabase } from './helpers/databases.js';

describe('the embedded database serves requests before background work', function () {
  this.timeout(30_000);
  let db: Db;
  before(async () => { db = await openPglite(); });
  after(async () => { await db.close(); });

  it('runs a statement of a request before the controllers\' statements queued ahead of it, but for the few already sent', async () => {
    const finished: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    const busy = db.background.transaction(async (tx) => {
      await tx.query('SELECT 1');
      await held;
    });
    const controllers = [1, 2, 3, 4, 5, 6].map((n) => db.background.query(`SELECT ${n} AS n`).then(() => finished.push(`controller ${n}`)));
    const request = db.query('SELECT 0 AS n').then(() => finished.push('request'));
    release();
    await Promise.all([busy, ...controllers, request]);
    // The database's thread is sent up to four statements (or transactions) ahead, one of them always a request's.
    expect(finished).to.deep.equal(['controller 1', 'controller 2', 'request', 'controller 3', 'controller 4', 'controller 5', 'controller 6']);
  });

  it('lets the event loop turn while the controllers\' statements queue, so that a request arriving meanwhile is read', async () => {
    let done = 0;
    let doneWhenTheLoopTurned: number | null = null;
    const statements = Array.from({ length: 2000 }, () => db.background.query('SELECT 1').then(() => { done += 1; }));
    setImmediate(() => { doneWhenTheLoopTurned = done; });
    await Promise.all(statements);
    expect(doneWhenTheLoopTurned).to.be.a('number').below(2000);
  });

  it('keeps background statements in their order, and a failed statement lets the next one through', async () => {
    const finished: string[] = [];
    const statements = [
      db.background.query('SELECT 1').then(() => finished.push('first')),
      db.background.query('SELECT * FROM no_such_table').catch(() => finished.push('failed')),
      db.background.query('SELECT 3').then(() => finished.push('third')),
    ];
    await Promise.all(statements);
    expect(finished).to.deep.equal(['first', 'failed', 'third']);
  });
});

describe('PostgreSQL keeps connections for requests', function () {
  this.timeout(30_000);
  const CONNECTIONS = 4;
  let db: Db;
  let drop: () => Promise<void>;
  before(async () => {
    const scratch = await createScratchDatabase();
    drop = scratch.drop;
    db = openPostgres(scratch.url, { max: CONNECTIONS });
  });
  after(async () => {
    await db.close();
    await drop();
  });

  it('answers a request while the controllers\' transactions would hold every connection', async () => {
    const finished: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    const controllers = Array.from({ length: CONNECTIONS }, (_, n) => db.background.transaction(async (tx) => {
      await tx.query('SELECT 1');
      await held;
    }).then(() => finished.push(`controller ${n}`)));
    const request = db.query('SELECT 0 AS n').then(() => finished.push('request'));
    // Without connections kept for it, the request would wait for the controllers: this lets them go in the end.
    const fallback = setTimeout(release, 5000);
    await request;
    release();
    clearTimeout(fallback);
    await Promise.all(controllers);
    expect(finished[0]).to.equal('request');
    expect(finished).to.have.length(CONNECTIONS + 1);
  });
});
