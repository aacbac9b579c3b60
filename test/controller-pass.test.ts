import { expect } from 'chai';
import winston from 'winston';
import { LeasedController } from '../controllers/leased.js';
import { ControllerManager, type Controller } from '../controllers/manager.js';
import { concerns, runChange, type RunInterest } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { migrate } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { upsertProject } from '../store/projects.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
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

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

for (const kind of DATABASE_KINDS) {
  describe(`controller passes on ${kind}`, function () {
    this.timeout(30_000);

    it('keep looking at every other row while one reconcile hangs', async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
      const db = scratch ? openPostgres(scratch.url) : await openPglite();
      await migrate(db);
      const project = await upsertProject(db, 'main', [{ type: 'local' }]);
      for (const name of ['stuck', 'a', 'b', 'c']) {
        await applyFleet(db, project.id, { name, spec: {}, requirement: {} as never, nodesMin: 0, nodesMax: 1, idleSeconds: null, backends: ['local'] });
      }
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
        await db.close();
        await scratch?.drop();
      }
    });

    it('reconcile a row claimed again while its reconcile still runs once that one ends, leaving it leased to nobody', async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
      const db = scratch ? openPostgres(scratch.url) : await openPglite();
      await migrate(db);
      const project = await upsertProject(db, 'main', [{ type: 'local' }]);
      await applyFleet(db, project.id, { name: 'stuck', spec: {}, requirement: {} as never, nodesMin: 0, nodesMax: 1, idleSeconds: null, backends: ['local'] });
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
        await db.close();
        await scratch?.drop();
      }
    });

    it('wake on a NOTIFY only the loops its payload concerns; one without a payload wakes all', async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
      const db = scratch ? openPostgres(scratch.url) : await openPglite();
      await migrate(db);
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
        await db.close();
        await scratch?.drop();
      }
    });
  });
}
