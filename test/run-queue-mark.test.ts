import { expect } from 'chai';
import { normalizeResources } from '../api/resources.js';
import type { Db } from '../store/db.js';
import { openDatabase } from '../store/open.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { queueMark, queueOrder, writeQueueReasons } from '../store/run-queue.js';
import { insertRun } from '../store/runs.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';

/**
 * The scheduler keeps the queue's order between passes for as long as the queue's mark stays the same, so the mark must
 * change with anything that changes the queue: a run joining it, falling due, being written, leaving it.
 */
for (const kind of DATABASE_KINDS) {
  describe(`the queue's mark on ${kind}`, function () {
    this.timeout(60_000);
    let db: Db;
    let drop: (() => Promise<void>) | undefined;
    let submit: (name: string) => Promise<string>;

    before(async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : undefined;
      drop = scratch?.drop;
      db = await openDatabase({ url: scratch?.url });
      const project = await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }]);
      const user = await upsertUser(db, 'alice', 'alice-token-0123456789', 'user');
      submit = async (name) => (await insertRun(db, {
        projectId: project.id, userId: user.id, name, kind: 'task', spec: { type: 'task', commands: ['true'] }, files: [], requirement: normalizeResources(undefined, 'run'), priority: 0,
      }))!.id;
    });
    after(async () => {
      await db.close();
      await drop?.();
    });

    /** The mark now, which must be the one the order is read with. */
    async function mark(): Promise<string> {
      const alone = await queueMark(db);
      expect((await queueOrder(db)).mark).to.equal(alone);
      return alone;
    }

    it('changes whenever the queue does, and only then', async () => {
      const empty = await mark();
      const first = await submit('first');
      const one = await mark();
      expect(one).to.not.equal(empty);
      expect(await mark()).to.equal(one);

      const [{ version }] = await db.query<{ version: string }>(`SELECT xmin::text AS version FROM runs WHERE id = $1`, [first]);
      await writeQueueReasons(db, [{ id: first, version, message: 'waiting: no capacity' }]);
      const written = await mark();
      expect(written).to.not.equal(one);

      const later = await submit('later');
      await db.query(`UPDATE runs SET next_reconcile_at = now() + interval '1 hour' WHERE id = $1`, [later]);
      const notYetDue = await mark();
      expect((await queueOrder(db)).entries.map((e) => e.id)).to.deep.equal([first]);
      await db.query(`UPDATE runs SET next_reconcile_at = now() - interval '1 second' WHERE id = $1`, [later]);
      const due = await mark();
      expect(due).to.not.equal(notYetDue);
      expect((await queueOrder(db)).entries.map((e) => e.id)).to.deep.equal([first, later]);

      await db.query(`UPDATE runs SET status = 'provisioning' WHERE id = $1`, [first]);
      const left = await mark();
      expect(left).to.not.equal(due);
      expect((await queueOrder(db)).entries.map((e) => e.id)).to.deep.equal([later]);
    });
  });
}
