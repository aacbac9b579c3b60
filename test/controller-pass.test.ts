import { expect } from 'chai';
import winston from 'winston';
import { LeasedController } from '../controllers/leased.js';
import { ControllerManager } from '../controllers/manager.js';
import type { Db, Row } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { migrate } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { upsertProject } from '../store/projects.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';

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
  });
}
