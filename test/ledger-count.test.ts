import { expect } from 'chai';
import type { Db, Queryable } from '../store/db.js';
import { migrate } from '../store/migrations.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { DATABASE_KINDS, openScratchDb } from './helpers/databases.js';

const offer = (gpus: number) => ({ backend: 'gpucloud', offerId: `x${gpus}`, gpu: { name: 'H100', memoryMib: 81920, count: gpus }, cpus: 8, memoryMib: 65536, diskMib: 100000, region: 'r', pricePerHour: gpus * 2, availability: 'available' });

/**
 * The ledger's count (migration 31) takes two ways: a trigger's one or two instances one at a time in small statements,
 * a batch in one statement. Each rule of the split must come out the same both ways: a whole holder's GPU share, a
 * replica's time to its service, blocks' shares by the fleet's, `auto` and an SSH host's own setting, ended holders
 * left out, the fleet's rest, hours split, an ended instance closed at its end, a closed account left alone.
 */
for (const kind of DATABASE_KINDS) {
  describe(`the ledger's count on ${kind}`, function () {
    this.timeout(60_000);
    let db: Db;
    let close: () => Promise<void>;

    before(async () => {
      ({ db, close } = await openScratchDb(kind));
      await migrate(db);
      const project = (await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }])).id;
      const user = (await upsertUser(db, 'u', 'u-token-0123456789', 'admin')).id;
      const fleets: [string, object][] = [
        ['plain', {}],
        ['split', { blocks: 4 }],
        ['auto', { blocks: 'auto' }],
        ['ssh', { blocks: 4, ssh_config: { user: 'u', hosts: ['other', { hostname: 'h1', blocks: 2 }] } }],
      ];
      for (const [name, spec] of fleets) {
        await db.query(`INSERT INTO fleets (id, project_id, name, spec, requirement, nodes_min, nodes_max, backends, status)
                        VALUES ($1, $2, $1, $3, '{}', 0, NULL, '["gpucloud"]', 'active')`, [name, project, spec]);
      }
      const instances: [string, string, number, string | null, string, object | null][] = [
        ['i-gpu-share', 'plain', 2, 'r-half', 'busy', null],
        ['i-whole', 'plain', 1, 'r-whole', 'busy', null],
        ['i-replica', 'plain', 1, 'r-replica', 'busy', null],
        ['i-idle', 'plain', 1, null, 'idle', null],
        ['i-split', 'split', 4, null, 'busy', null],
        ['i-auto', 'auto', 8, null, 'busy', null],
        ['i-ssh', 'ssh', 4, null, 'busy', { hostname: 'h1', port: '22' }],
        ['i-ended', 'plain', 1, null, 'terminated', null],
        ['i-closed', 'plain', 1, null, 'terminated', null],
      ];
      for (const [id, fleet, gpus, runId, status, sshHost] of instances) {
        await db.query(
          `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, offer, agent_token, status, run_id, ssh_host,
             provisioning_started_at, terminated_at)
           VALUES ($1, $2, $3, $1, 'gpucloud', '{}', $4, 't', $5, $6, $7, now() - interval '3 hours',
             CASE WHEN $5 = 'terminated' THEN now() - interval '30 minutes' END)`,
          [id, project, fleet, offer(gpus), status, runId, sshHost]);
        await db.query(
          `INSERT INTO instance_accruals (instance_id, price_per_hour, started_at, accrued_until, closed)
           VALUES ($1, $2, now() - interval '3 hours', now() - interval '150 minutes', $1 = 'i-closed')`, [id, gpus * 2]);
      }
      const runs: [string, string | null, string, string | null, number[] | null, object, string | null][] = [
        ['r-half', 'i-gpu-share', 'running', null, null, { gpu: { count: { min: 1 } } }, null],
        ['r-whole', 'i-whole', 'running', null, null, {}, null],
        ['s-service', null, 'running', null, null, {}, null],
        ['r-replica', 'i-replica', 'running', null, null, {}, 's-service'],
        ['r-b1', 'i-split', 'running', 'split', [0], {}, null],
        ['r-b2', 'i-split', 'running', 'split', [1, 2], {}, null],
        ['r-b-done', 'i-split', 'done', 'split', [3], {}, null],
        ['r-a', 'i-auto', 'running', 'auto', [0, 1], {}, null],
        ['r-h', 'i-ssh', 'running', 'ssh', [0], {}, null],
      ];
      for (const [id, instanceId, status, fleet, blocks, requirement, serviceId] of runs) {
        await db.query(
          `INSERT INTO runs (id, project_id, user_id, name, kind, spec, files, requirement, priority, status, instance_id, fleet_id, blocks, service_id)
           VALUES ($1, $2, $3, $1, $4, '{}', '[]', $5, 0, $6, $7, $8, $9, $10)`,
          [id, project, user, id === 's-service' ? 'service' : 'task', requirement, status, instanceId, fleet, blocks, serviceId]);
      }
    });
    after(() => close());

    interface Counted { counted: number; accounts: unknown[]; pieces: unknown[] }
    const read = async (tx: Queryable, counted: number): Promise<Counted> => ({
      counted,
      accounts: await tx.query(`SELECT instance_id, closed, accrued_until, round(seconds::numeric, 6)::float8 AS seconds,
                                  round(dollars::numeric, 9)::float8 AS dollars FROM instance_accruals ORDER BY instance_id`),
      pieces: await tx.query(`SELECT hour, instance_id, run_id, round(seconds::numeric, 6)::float8 AS seconds,
                                round(dollars::numeric, 9)::float8 AS dollars FROM cost_hours ORDER BY instance_id, hour, run_id`),
    });

    it('charges each holder the same share one instance at a time as in a batch', async () => {
      const { oneAtATime, batch, shares } = await db.transaction(async (tx) => {
        await tx.query('SAVEPOINT before_count');
        let counted = 0;
        for (const { id } of await tx.query<{ id: string }>('SELECT id FROM instances ORDER BY id')) {
          const [row] = await tx.query<{ n: number }>('SELECT ledger_count(ARRAY[id], ARRAY[run_id]) AS n FROM instances WHERE id = $1', [id]);
          counted += row!.n;
        }
        const oneAtATime = await read(tx, counted);
        await tx.query('ROLLBACK TO SAVEPOINT before_count');
        const [all] = await tx.query<{ n: number }>('SELECT ledger_count(array_agg(id ORDER BY id), array_agg(run_id ORDER BY id)) AS n FROM instances');
        const batch = await read(tx, all!.n);
        const shares = await tx.query<{ instance_id: string; run_id: string; share: number }>(
          `SELECT instance_id, run_id, round((sum(seconds) / sum(sum(seconds)) OVER (PARTITION BY instance_id))::numeric, 6)::float8 AS share
           FROM cost_hours GROUP BY instance_id, run_id ORDER BY instance_id, run_id`);
        const [ended] = await tx.query<{ seconds: number; closed: boolean }>(`SELECT seconds, closed FROM instance_accruals WHERE instance_id = 'i-ended'`);
        expect(ended!.closed).to.equal(true);
        expect(ended!.seconds).to.be.closeTo(120 * 60, 1);
        return { oneAtATime, batch, shares };
      });
      expect(batch.counted).to.equal(8);
      expect(oneAtATime).to.deep.equal(batch);
      expect(shares.map((s) => `${s.instance_id} ${s.run_id || 'fleet'} ${s.share}`)).to.deep.equal([
        'i-auto fleet 0.75', 'i-auto r-a 0.25',
        'i-ended fleet 1',
        'i-gpu-share fleet 0.5', 'i-gpu-share r-half 0.5',
        'i-idle fleet 1',
        'i-replica s-service 1',
        'i-split fleet 0.25', 'i-split r-b1 0.25', 'i-split r-b2 0.5',
        'i-ssh fleet 0.5', 'i-ssh r-h 0.5',
        'i-whole r-whole 1',
      ]);
      expect(new Set((batch.pieces as { hour: Date }[]).map((p) => p.hour.getTime())).size).to.be.at.least(3);
    });
  });
}
