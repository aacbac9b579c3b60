import { expect } from 'chai';
import type { Db } from '../store/db.js';
import { accrue } from '../store/ledger.js';
import { openDatabase } from '../store/open.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';

const REQUIREMENT = { gpu: { models: null, memoryMib: { min: null, max: null }, count: { min: null, max: null } }, cpus: { min: null, max: null }, memoryMib: { min: null, max: null }, diskMib: { min: null, max: null }, shmSizeMib: null };
const offer = (gpus: number) => ({ backend: 'ssh', offerId: 'host', gpu: { name: 'H100', memoryMib: 81920, count: gpus }, cpus: 32, memoryMib: 262144, diskMib: 1024000, region: 'on-prem', pricePerHour: 8, availability: 'available' });
const sshHost = (hostname: string, port: number) => ({ name: port === 22 ? hostname : `${hostname}:${port}`, hostname, port, user: 'ubuntu', identityFile: '~/.ssh/id_rsa', proxyJump: null, internalIp: null, network: null });

/**
 * An SSH fleet's host may split itself into blocks of its own (ssh_config.hosts[].blocks), which win over the fleet's
 * `blocks`, as the scheduler places runs: the ledger splits each host's time by that host's blocks.
 */
for (const kind of DATABASE_KINDS) {
  describe(`the ledger on an SSH fleet whose hosts have blocks of their own (${kind})`, function () {
    this.timeout(60_000);
    let db: Db;
    let drop: (() => Promise<void>) | undefined;

    before(async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : undefined;
      drop = scratch?.drop;
      db = await openDatabase({ url: scratch?.url });
      const project = await upsertProject(db, 'main', [{ type: 'local' } as never]);
      const alice = await upsertUser(db, 'alice', 'alice-token-0123456789', 'user');
      const spec = {
        type: 'fleet', name: 'on-prem', blocks: 2,
        ssh_config: { port: 2222, hosts: [{ hostname: '10.0.0.1', port: 22, blocks: 4 }, { hostname: '10.0.0.2', blocks: 'auto' }, '10.0.0.3'] },
      };
      await db.query(
        `INSERT INTO fleets (id, project_id, name, spec, requirement, nodes_min, nodes_max, backends, status)
         VALUES ('f-1', $1, 'on-prem', $2, $3, 3, 3, '["ssh"]', 'active')`, [project.id, spec, REQUIREMENT]);
      // Each host runs one run: 1 of 4 blocks on the first, 2 of 8 (one per GPU) on the second, 1 of the fleet's 2 on the third.
      const hosts: [string, ReturnType<typeof sshHost>, number, number[]][] = [
        ['i-1', sshHost('10.0.0.1', 22), 4, [0]], ['i-2', sshHost('10.0.0.2', 2222), 8, [0, 1]], ['i-3', sshHost('10.0.0.3', 2222), 2, [1]],
      ];
      for (const [id, host, gpus, blocks] of hosts) {
        await db.query(
          `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, offer, agent_token, status, ssh_host, provisioning_started_at)
           VALUES ($1, $2, 'f-1', $1, 'ssh', $3, $4, 'token', 'busy', $5, now())`, [id, project.id, REQUIREMENT, offer(gpus), host]);
        await db.query(
          `INSERT INTO instance_accruals (instance_id, price_per_hour, started_at, accrued_until)
           VALUES ($1, 8, now() - interval '100 seconds', now() - interval '100 seconds')`, [id]);
        await db.query(
          `INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status, fleet_id, instance_id, blocks)
           VALUES ($1, $2, $3, $4, 'task', '{}', $5, 'running', 'f-1', $6, $7::int[])`, [`r-${id}`, project.id, alice.id, `run-${id}`, REQUIREMENT, id, blocks]);
      }
    });
    after(async () => {
      await db.close();
      await drop?.();
    });

    it('charges each run its blocks over its own host\'s blocks, and the fleet the rest', async () => {
      expect(await accrue(db)).to.equal(3);
      const rows = await db.query<{ instance_id: string; run_id: string; seconds: number; dollars: number }>(
        'SELECT instance_id, run_id, sum(seconds)::float8 AS seconds, sum(dollars)::float8 AS dollars FROM cost_hours GROUP BY 1, 2');
      const shares = Object.fromEntries(['i-1', 'i-2', 'i-3'].map((id) => {
        const of = rows.filter((r) => r.instance_id === id);
        const total = of.reduce((sum, r) => sum + r.seconds, 0);
        expect(total, id).to.be.within(100, 110);
        return [id, of.find((r) => r.run_id === `r-${id}`)!.seconds / total];
      }));
      expect(shares['i-1']).to.be.closeTo(1 / 4, 1e-9);
      expect(shares['i-2']).to.be.closeTo(2 / 8, 1e-9);
      expect(shares['i-3']).to.be.closeTo(1 / 2, 1e-9);
    });
  });
}
