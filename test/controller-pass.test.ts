import { expect } from 'chai';
import winston from 'winston';
import { LeasedController } from '../controllers/leased.js';
import { LedgerController } from '../controllers/ledger-controller.js';
import { ControllerManager, type Controller } from '../controllers/manager.js';
import { CHANNELS, concerns, runChange, type RunInterest } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { migrate } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { upsertProject } from '../store/projects.js';
import { createScratchDatabase, DATABASE_KINDS, type DatabaseKind } from './helpers/databases.js';
import { eventually } from './helpers/server.js';

/** Looks at fleets; the one named `stuck` hangs until released, as a call to an agent that never answers would. */
class Recorder extends LeasedController<Row> {
  readonly name = 'recorder';
  readonly looks = new Map<string, number>();
  release: () => void = () => {};
  private readonly stuck = new Promise<void>((resolve) => { this.release = resolve; });

  constructor(db: Db) {
    super(db, 'test-owner', winston.createLogger({ silent: true }), { table: 'fleets', channel: 'test_fleets', where: 'true', concurrency: 4 });
  }

  protected toRecord(row: Row): Row {
    return row;
  }

  protected async reconcile(row: Row): Promise<number> {
    this.looks.set(row.name, (this.looks.get(row.name) ?? 0) + 1);
    if (row.name === 'stuck') await this.stuck;
    return 50;
  }
}

/** Looks at fleets one at a time, each due again at once: more rows always fall due than it gets through. */
class Spinner extends LeasedController<Row> {
  readonly name = 'spinner';
  looks = 0;

  constructor(db: Db) {
    super(db, 'test-owner', winston.createLogger({ silent: true }), { table: 'fleets', channel: 'test_fleets', where: 'true', concurrency: 1 });
  }

  protected toRecord(row: Row): Row {
    return row;
  }

  protected async reconcile(): Promise<number> {
    this.looks += 1;
    return 0;
  }
}

/** Looks at fleets, waiting for `finish` before each reconcile ends; the next look is a minute away. */
class Holder extends LeasedController<Row> {
  readonly name = 'holder';
  finish: () => void = () => {};
  private readonly finished = new Promise<void>((resolve) => { this.finish = resolve; });

  constructor(db: Db) {
    super(db, 'test-owner', winston.createLogger({ silent: true }), { table: 'fleets', channel: 'test_fleets', where: 'true' });
  }

  protected toRecord(row: Row): Row {
    return row;
  }

  protected async reconcile(): Promise<number> {
    await this.finished;
    return 60_000;
  }
}

/** Looks at fleets that are not `done` every `everyMs`, keeping each leased between looks (`holding`), on a 2 s lease. */
class Keeper extends LeasedController<Row> {
  readonly name = 'keeper';
  readonly looks = new Map<string, number>();

  constructor(db: Db, owner = 'test-owner', private readonly everyMs = 100) {
    super(db, owner, winston.createLogger({ silent: true }), { table: 'fleets', channel: 'test_fleets', where: `status_message <> 'done'`, leaseMs: 2000, holding: true });
  }

  protected toRecord(row: Row): Row {
    return row;
  }

  protected override holds(): boolean {
    return true;
  }

  protected async reconcile(row: Row): Promise<number> {
    this.looks.set(row.name, (this.looks.get(row.name) ?? 0) + 1);
    return this.everyMs;
  }
}

/** Counts its passes; hears what `interest` says (everything without one). */
class PassCounter implements Controller {
  readonly channel = 'test_runs';
  passes = 0;
  readonly hears?: (payload: string) => boolean;

  constructor(readonly name: string, interest?: RunInterest) {
    if (interest) this.hears = (payload) => concerns(payload, interest);
  }

  async pass(): Promise<void> {
    this.passes += 1;
  }
}

/** Looks at fleets that are never due (`where` false): every pass finds nothing. */
class Idle extends LeasedController<Row> {
  readonly name = 'idle';

  constructor(db: Db) {
    super(db, 'test-owner', winston.createLogger({ silent: true }), { table: 'fleets', channel: 'test_fleets', where: 'false' });
  }

  protected toRecord(row: Row): Row {
    return row;
  }

  protected async reconcile(): Promise<number> {
    return 1000;
  }
}

/** The database, counting the statements whose text matches `pattern`. */
function counting(db: Db, pattern: RegExp): { db: Db; count: () => number } {
  let count = 0;
  const counted = <T>(sql: string, run: () => T) => {
    if (pattern.test(sql)) count += 1;
    return run();
  };
  const countingDb: Db = {
    driver: db.driver,
    query: (sql, params) => counted(sql, () => db.query(sql, params)),
    exec: (sql) => counted(sql, () => db.exec(sql)),
    transaction: (fn) => db.transaction((tx) => fn({ query: (sql, params) => counted(sql, () => tx.query(sql, params)) })),
    listen: (channel, onNotify) => db.listen(channel, onNotify),
    notify: (channel, payload) => db.notify(channel, payload),
    close: () => db.close(),
    get background() { return countingDb; },
  };
  return { count: () => count, db: countingDb };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A migrated database of `kind`; `close` also drops a scratch PostgreSQL one. */
async function openMigrated(kind: DatabaseKind): Promise<{ db: Db; close(): Promise<void> }> {
  const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
  const db = scratch ? openPostgres(scratch.url) : await openPglite();
  await migrate(db);
  return { db, close: async () => { await db.close(); await scratch?.drop(); } };
}

/** Fleets of project main by these names: the rows the test controllers look at. */
async function addFleets(db: Db, names: string[]): Promise<void> {
  const project = await upsertProject(db, 'main', [{ type: 'local' }]);
  for (const name of names) {
    await applyFleet(db, project.id, { name, spec: {}, requirement: {} as never, nodesMin: 0, nodesMax: 1, idleSeconds: null, backends: ['local'] });
  }
}

for (const kind of DATABASE_KINDS) {
  describe(`controller passes on ${kind}`, function () {
    this.timeout(30_000);

    it('keep looking at every other row while one reconcile hangs', async () => {
      const { db, close } = await openMigrated(kind);
      await addFleets(db, ['stuck', 'a', 'b', 'c']);
      const recorder = new Recorder(db);
      const manager = new ControllerManager(db, 'test-owner', [recorder], winston.createLogger({ silent: true }), 1000);
      try {
        await manager.start();
        await new Promise((r) => setTimeout(r, 2000));
        expect(recorder.looks.get('stuck')).to.equal(1);
        for (const name of ['a', 'b', 'c']) expect(recorder.looks.get(name), name).to.be.at.least(10);
      } finally {
        recorder.release();
        await manager.stop();
        await close();
      }
    });

    it('reconcile a row claimed again while its reconcile still runs once that one ends, leaving it leased to nobody', async () => {
      const { db, close } = await openMigrated(kind);
      await addFleets(db, ['stuck']);
      const recorder = new Recorder(db);
      try {
        await recorder.pass();
        expect(recorder.looks.get('stuck')).to.equal(1);
        // As a claim ahead takes a row whose reconcile has given its lease back but not yet ended.
        const claimedAgain = await db.query(`UPDATE fleets SET lease_owner = 'test-owner', lease_expires_at = now() + interval '15 seconds' WHERE name = 'stuck' RETURNING *`);
        recorder.adopt(claimedAgain);
        recorder.release();
        await recorder.settle();
        expect(recorder.looks.get('stuck')).to.equal(2);
        const [row] = await db.query<{ lease_owner: string | null }>(`SELECT lease_owner FROM fleets WHERE name = 'stuck'`);
        expect(row!.lease_owner).to.equal(null);
      } finally {
        recorder.release();
        await recorder.settle();
        await close();
      }
    });

    it('give a row\'s lease back when the first try fails (as a deadlock\'s victim), and never stop the server for it', async () => {
      const { db, close } = await openMigrated(kind);
      await addFleets(db, ['a']);
      let failures = 0;
      const failingOnce: Db = {
        ...db,
        query: (text, params) => {
          if (/SET lease_owner = NULL/.test(text) && failures++ === 0) return Promise.reject(new Error('deadlock detected'));
          return db.query(text, params);
        },
      };
      const recorder = new Recorder(failingOnce);
      try {
        await recorder.pass();
        await recorder.settle();
        expect(failures).to.equal(2);
        const [row] = await db.query<{ lease_owner: string | null }>(`SELECT lease_owner FROM fleets WHERE name = 'a'`);
        expect(row!.lease_owner).to.equal(null);
      } finally {
        await recorder.settle().catch(() => undefined);
        await close();
      }
    });

    // PGlite has one connection: no transaction holds a row beside another statement, so this is PostgreSQL's alone.
    if (kind === 'postgres') it('give leases back while another transaction holds some of their rows, which then waits for the others', async () => {
      const { db, close } = await openMigrated(kind);
      await addFleets(db, ['first', 'second']);
      await db.query(`UPDATE fleets SET next_reconcile_at = now() - interval '1 second' WHERE name = 'first'`);
      const holder = new Holder(db);
      try {
        await holder.pass();
        // Rewritten in this order, the rows lie in it too: the releases come in it and a scan finds them so.
        for (const name of ['first', 'second']) await db.query(`UPDATE fleets SET status_message = 'claimed' WHERE name = $1`, [name]);
        let secondLocked: () => void = () => {};
        const locked = new Promise<void>((resolve) => { secondLocked = resolve; });
        // As the scheduler's placement, which writes rows one after another in its own order.
        const placement = db.transaction(async (tx) => {
          await tx.query(`SELECT id FROM fleets WHERE name = 'second' FOR UPDATE`);
          secondLocked();
          await sleep(300);
          await tx.query(`UPDATE fleets SET status_message = 'written by a transaction' WHERE name = 'first'`);
        });
        await locked;
        holder.finish();
        await placement;
        await holder.settle();
        const rows = await db.query<{ name: string; lease_owner: string | null; due_in_s: number }>(
          `SELECT name, lease_owner, EXTRACT(EPOCH FROM next_reconcile_at - now())::float8 AS due_in_s FROM fleets ORDER BY name`);
        expect(rows.map((row) => [row.name, row.lease_owner])).to.deep.equal([['first', null], ['second', null]]);
        for (const row of rows) expect(row.due_in_s, row.name).to.be.within(55, 60);
      } finally {
        holder.finish();
        await holder.settle().catch(() => {});
        await close();
      }
    });

    it('keep held rows leased between looks, read again instead of claimed and given back, with leases renewed; give one back once it no longer matches', async () => {
      const { db, close } = await openMigrated(kind);
      await addFleets(db, ['a', 'b']);
      const written = { claimed: 0, released: 0, renewals: 0 };
      const watched: Db = {
        ...db,
        query: async (text, params) => {
          const rows = await db.query(text, params);
          if (/SET lease_owner = \$1/.test(text)) written.claimed += rows.length;
          if (/lease_owner = NULL/.test(text)) written.released += 1;
          if (/WITH renewed/.test(text)) written.renewals += (params![1] as string[]).length;
          return rows as never;
        },
      };
      const keeper = new Keeper(watched);
      const manager = new ControllerManager(watched, 'test-owner', [keeper], winston.createLogger({ silent: true }), 1000);
      const leases = async () => Object.fromEntries((await db.query<{ name: string; lease_owner: string | null; left_ms: number | null }>(
        `SELECT name, lease_owner, (EXTRACT(EPOCH FROM lease_expires_at - now()) * 1000)::float8 AS left_ms FROM fleets ORDER BY name`)).map((row) => [row.name, row]));
      try {
        await manager.start();
        await sleep(4500);
        // Over twice the 2 s lease: claimed once, never given back, renewed about once a second (each look would be two writes).
        for (const name of ['a', 'b']) expect(keeper.looks.get(name), name).to.be.at.least(20);
        expect(written).to.include({ claimed: 2, released: 0 });
        expect(written.renewals).to.be.within(4, 12);
        const held = await leases();
        for (const name of ['a', 'b']) {
          expect(held[name]!.lease_owner, name).to.equal('test-owner');
          expect(held[name]!.left_ms, name).to.be.greaterThan(0);
        }
        expect(await new Keeper(db, 'another-server').pass().then(() => db.query(`SELECT name FROM fleets WHERE lease_owner = 'another-server'`))).to.deep.equal([]);
        await db.query(`UPDATE fleets SET status_message = 'done' WHERE name = 'a'`);
        await eventually(async () => (await leases()).a!.lease_owner === null, 3000, 'a given back once it no longer matches');
        const looksAtA = keeper.looks.get('a');
        await sleep(500);
        expect(keeper.looks.get('a'), 'no look at a row given back').to.equal(looksAtA);
        expect((await leases()).b!.lease_owner).to.equal('test-owner');
      } finally {
        await manager.stop();
      }
      try {
        expect((await leases()).b!.lease_owner, 'held rows go back when the server stops').to.equal(null);
      } finally {
        await close();
      }
    });

    it('look at once at a held row that someone made due, after the NOTIFY that says so', async () => {
      const { db, close } = await openMigrated(kind);
      await addFleets(db, ['a', 'b']);
      const keeper = new Keeper(db, 'test-owner', 1900);
      const manager = new ControllerManager(db, 'test-owner', [keeper], winston.createLogger({ silent: true }), 1000);
      try {
        await manager.start();
        await eventually(async () => keeper.looks.get('a') === 1 && keeper.looks.get('b') === 1, 5000, 'a first look at each');
        // As a stop request does to a run.
        await db.query(`UPDATE fleets SET next_reconcile_at = now() WHERE name = 'a'`);
        await db.notify('test_fleets');
        await eventually(async () => keeper.looks.get('a') === 2, 1000, 'a second look at a, well before it was due');
        expect(keeper.looks.get('b')).to.equal(1);
      } finally {
        await manager.stop();
        await close();
      }
    });

    it('stop while more rows keep falling due than a loop gets through', async () => {
      const { db, close } = await openMigrated(kind);
      await addFleets(db, ['a', 'b', 'c']);
      const spinner = new Spinner(db);
      const manager = new ControllerManager(db, 'test-owner', [spinner], winston.createLogger({ silent: true }), 1000);
      try {
        await manager.start();
        await eventually(async () => spinner.looks >= 20, 10_000, 'the loop to be busy');
        await manager.stop();
        const looksAtStop = spinner.looks;
        await sleep(300);
        expect(spinner.looks).to.equal(looksAtStop);
      } finally {
        await close();
      }
    });

    it('wake on a NOTIFY only the loops its payload concerns; one without a payload wakes all', async () => {
      const { db, close } = await openMigrated(kind);
      const starter = new PassCounter('start', { statuses: ['provisioning'] });
      const watcher = new PassCounter('watch', { statuses: ['running', 'terminating'] });
      const services = new PassCounter('services', { statuses: [], family: true });
      const deaf = new PassCounter('every change');
      const loops = [starter, watcher, services, deaf];
      const manager = new ControllerManager(db, 'test-owner', loops, winston.createLogger({ silent: true }), 60_000);
      const passes = () => loops.map((c) => c.passes);
      try {
        await manager.start();
        await eventually(async () => loops.every((c) => c.passes === 1), 5000, 'the first passes');
        await db.notify('test_runs', runChange([{ status: 'provisioning', kind: 'task', replica: null, spec: {} }]));
        await eventually(async () => starter.passes === 2, 5000, 'the start loop to wake');
        await sleep(300);
        expect(passes()).to.deep.equal([2, 1, 1, 2]);
        await db.notify('test_runs', runChange([{ status: 'running', kind: 'service', replica: 0, spec: {} }]));
        await eventually(async () => watcher.passes === 2, 5000, 'the watch loop to wake');
        await sleep(300);
        expect(passes()).to.deep.equal([2, 2, 2, 3]);
        await db.notify('test_runs');
        await eventually(async () => loops.every((c) => c.passes === 3 || c === deaf), 5000, 'every loop to wake');
      } finally {
        await manager.stop();
        await close();
      }
    });

    it('ask when the next row falls due only after a NOTIFY, not on every pass that finds nothing', async () => {
      const { db: opened, close } = await openMigrated(kind);
      const { db, count } = counting(opened, /min\(next_reconcile_at\)/);
      const claims = counting(opened, /SET lease_owner = \$1/);
      const idle = new Idle(db);
      const claiming = new Idle(claims.db);
      const manager = new ControllerManager(opened, 'test-owner', [idle, claiming], winston.createLogger({ silent: true }), 50);
      try {
        await manager.start();
        await sleep(1000);
        expect(claims.count(), 'claims: the interval stays the safety net').to.be.at.least(8);
        expect(count(), 'next-due reads without a NOTIFY').to.equal(1);
        await opened.notify('test_fleets');
        await eventually(async () => count() === 2, 5000, 'a NOTIFY to make it read again');
        await sleep(300);
        expect(count()).to.equal(2);
      } finally {
        await manager.stop();
        await close();
      }
    });

    it('settle ended instances in the ledger between its counts only after a NOTIFY on instances', async () => {
      const { db: opened, close } = await openMigrated(kind);
      const { db, count } = counting(opened, /instance_accruals/);
      const manager = new ControllerManager(opened, 'test-owner', [new LedgerController(db, winston.createLogger({ silent: true }), 60_000)], winston.createLogger({ silent: true }), 50);
      try {
        await manager.start();
        await eventually(async () => count() > 0, 5000, 'the first count');
        await sleep(1000);
        const afterTheFirstCount = count();
        expect(afterTheFirstCount, 'looks between counts with nothing heard').to.be.at.most(2);
        await opened.notify(CHANNELS.instances);
        await eventually(async () => count() === afterTheFirstCount + 1, 5000, 'a NOTIFY to make it settle ended instances');
      } finally {
        await manager.stop();
        await close();
      }
    });
  });
}
