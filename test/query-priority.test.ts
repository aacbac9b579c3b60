import { expect } from 'chai';
import type { Db } from '../store/db.js';
import { openPglite } from '../store/pglite.js';
import { inBackground } from '../store/query-priority.js';

describe('the embedded database serves requests before background work', function () {
  this.timeout(30_000);
  let db: Db;
  before(async () => { db = await openPglite(); });
  after(async () => { await db.close(); });

  it('runs a statement of a request before the controllers\' statements queued ahead of it', async () => {
    const finished: string[] = [];
    let release!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    const busy = inBackground(() => db.transaction(async (tx) => {
      await tx.query('SELECT 1');
      await held;
    }));
    const controllers = inBackground(() => [1, 2, 3].map((n) => db.query(`SELECT ${n} AS n`).then(() => finished.push(`controller ${n}`))));
    const request = db.query('SELECT 0 AS n').then(() => finished.push('request'));
    release();
    await Promise.all([busy, ...controllers, request]);
    expect(finished).to.deep.equal(['request', 'controller 1', 'controller 2', 'controller 3']);
  });

  it('keeps background statements in their order, and a failed statement lets the next one through', async () => {
    const finished: string[] = [];
    const statements = inBackground(() => [
      db.query('SELECT 1').then(() => finished.push('first')),
      db.query('SELECT * FROM no_such_table').catch(() => finished.push('failed')),
      db.query('SELECT 3').then(() => finished.push('third')),
    ]);
    await Promise.all(statements);
    expect(finished).to.deep.equal(['first', 'failed', 'third']);
  });
});
