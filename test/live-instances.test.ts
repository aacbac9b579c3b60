import { expect } from 'chai';
import { LiveInstances } from '../controllers/live-instances.js';
import type { Db } from '../store/db.js';
import { openDatabase } from '../store/open.js';
import { upsertProject } from '../store/projects.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';

/**
 * The scheduler keeps each instance it read whole between passes for as long as the instance's row is not written, so
 * every pass must still see the instances as they are now: a write by anyone, an instance new or ended, and never the
 * changes a pass made to its own copies.
 */
for (const kind of DATABASE_KINDS) {
  describe(`the scheduler's live instances on ${kind}`, function () {
    this.timeout(60_000);
    let db: Db;
    let drop: (() => Promise<void>) | undefined;
    let projectId: string;
    let otherProjectId: string;

    const addInstance = (id: string, project: string, status: string) => db.query(
      `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, agent_token, status, created_at)
       VALUES ($1, $2, 'f-' || $2, $1, 'local', '{}', 'token', $3, now() + (SELECT count(*) FROM instances) * interval '1 second')`, [id, project, status]);

    before(async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : undefined;
      drop = scratch?.drop;
      db = await openDatabase({ url: scratch?.url });
      projectId = (await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }])).id;
      otherProjectId = (await upsertProject(db, 'other', [{ type: 'local', runtime: 'process' }])).id;
      for (const project of [projectId, otherProjectId]) {
        await db.query(`INSERT INTO fleets (id, project_id, name, spec, requirement, nodes_min, nodes_max, backends, status)
                        VALUES ('f-' || $1, $1, 'f', '{}', '{}', 0, NULL, '["local"]', 'active')`, [project]);
      }
    });
    after(async () => {
      await db.close();
      await drop?.();
    });

    it('sees every write, new and ended instance, in order, and none of a pass\'s own changes', async () => {
      const live = new LiveInstances();
      await addInstance('a', projectId, 'idle');
      await addInstance('b', projectId, 'busy');
      await addInstance('x', otherProjectId, 'idle');
      await addInstance('gone', projectId, 'terminated');
      const view = async () => (await live.read(db, projectId)).map((i) => [i.id, i.status, i.runId]);
      expect(await view()).to.deep.equal([['a', 'idle', null], ['b', 'busy', null]]);

      const first = await live.read(db, projectId);
      first[0]!.status = 'busy';
      first[0]!.runId = 'placed-in-a-pass-that-rolled-back';
      expect(await view()).to.deep.equal([['a', 'idle', null], ['b', 'busy', null]]);

      await db.query(`UPDATE instances SET status = 'idle', idle_since = now() WHERE id = 'b'`);
      await db.query(`UPDATE instances SET run_id = 'r-1', status = 'busy' WHERE id = 'a'`);
      expect(await view()).to.deep.equal([['a', 'busy', 'r-1'], ['b', 'idle', null]]);

      await addInstance('c', projectId, 'pending');
      await db.query(`UPDATE instances SET status = 'terminated' WHERE id = 'b'`);
      expect(await view()).to.deep.equal([['a', 'busy', 'r-1'], ['c', 'pending', null]]);
      expect((await live.read(db, otherProjectId)).map((i) => i.id)).to.deep.equal(['x']);
      expect(await view()).to.deep.equal([['a', 'busy', 'r-1'], ['c', 'pending', null]]);
    });
  });
}
