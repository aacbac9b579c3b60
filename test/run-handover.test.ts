import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import winston from 'winston';
import type { Offer } from '../api/offer.js';
import { normalizeResources } from '../api/resources.js';
import { AgentClient } from '../agent/client.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import type { BackendPool } from '../controllers/backend-pool.js';
import { RunController } from '../controllers/run-controller.js';
import { RunWatchController } from '../controllers/run-watch.js';
import { Scheduler, type PlacedRunStarter } from '../controllers/scheduler.js';
import type { Db, Row } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { insertInstance } from '../store/instances.js';
import { migrate } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { insertRun } from '../store/runs.js';
import { SecretBox } from '../store/secrets.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { randomToken, waitForState } from './helpers/agent-jobs.js';
import { eventually } from './helpers/server.js';

const OFFER: Offer = { backend: 'local', offerId: 'machine', gpu: { name: '', memoryMib: 0, count: 0 }, cpus: 2, memoryMib: 4096, diskMib: 10_240, region: 'here', pricePerHour: 0, availability: 'available' };
const pool = { offers: async () => ({ offers: [OFFER], backends: [], errors: [] }) } as unknown as BackendPool;

/** A start loop that counts its claims: a run it starts without one was handed to it by the scheduler. */
class CountingStart extends RunController {
  claims = 0;

  constructor(db: Db, owner: string) {
    super(db, owner, winston.createLogger({ silent: true }), 'start', 1 << 20, new SecretBox(randomBytes(32)));
  }

  protected override claim(limit: number): Promise<Row[]> {
    this.claims += 1;
    return super.claim(limit);
  }
}

/** Forwards to an agent, holding every DELETE (the removal of a job) until `release()`. */
async function holdingRemovals(agentUrl: string): Promise<{ url: string; held: () => number; release(): void; close(): Promise<void> }> {
  const waiting: Array<() => void> = [];
  let released = false;
  const server: Server = createServer((req, res) => {
    const forward = () => req.pipe(request(new URL(req.url!, agentUrl), { method: req.method, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode!, answer.headers);
      answer.pipe(res);
    }));
    if (req.method === 'DELETE' && !released) waiting.push(forward);
    else forward();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    held: () => waiting.length,
    release: () => { released = true; for (const forward of waiting.splice(0)) forward(); },
    close: () => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()); }),
  };
}

for (const kind of DATABASE_KINDS) {
  describe(`a run's start and end on an instance that is up (${kind})`, function () {
    this.timeout(120_000);
    let db: Db;
    let drop: () => Promise<void>;
    let agent: RunningAgent;
    let agentToken: string;
    let runId: string;
    let instanceId: string;

    beforeEach(async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
      db = scratch ? openPostgres(scratch.url) : await openPglite();
      drop = async () => { await db.close(); await scratch?.drop(); };
      await migrate(db);
      agentToken = randomToken();
      agent = await startAgent({ token: agentToken, runtime: 'process', orphanTimeoutSeconds: 0 });
      const project = await upsertProject(db, 'main', [{ type: 'local' }]);
      const user = await upsertUser(db, 'admin', 'token', 'admin');
      const { fleet } = await applyFleet(db, project.id, { name: 'local', spec: {}, requirement: normalizeResources(undefined, 'fleet'), nodesMin: 0, nodesMax: 1, idleSeconds: null, backends: ['local'] });
      const instance = await insertInstance(db, { projectId: project.id, fleetId: fleet.id, fleetName: 'local', backend: 'local', requirement: fleet.requirement, runId: null });
      instanceId = instance.id;
      await db.query(`UPDATE instances SET status = 'idle', agent_url = $2, agent_token = $3, offer = $4 WHERE id = $1`, [instance.id, agent.url, agentToken, OFFER]);
      const run = await insertRun(db, {
        projectId: project.id, userId: user.id, name: 'hello', kind: 'task', spec: { type: 'task', name: 'hello', commands: ['sleep 30'] },
        files: [], requirement: normalizeResources(undefined, 'run'), priority: 0,
      });
      runId = run!.id;
    });
    afterEach(async () => {
      await agent.close();
      await drop();
    });

    it('is started by the server that placed it, without its start loop claiming it', async () => {
      const start = new CountingStart(db, 'server-a');
      await new Scheduler(db, pool, start).pass();
      await start.settle();
      expect(start.claims).to.equal(0);
      const [run] = await db.query(`SELECT status, job_id, lease_owner FROM runs WHERE id = $1`, [runId]);
      expect(run).to.deep.equal({ status: 'running', job_id: runId, lease_owner: null });
      await waitForState(new AgentClient(agent.url, agentToken), runId, ['running']);
    });

    it('starts with the instance and fleet its placement read, reading neither again, and its job gets the fleet\'s env', async () => {
      await db.query(`UPDATE fleets SET spec = '{"env": {"GREETING": "from the fleet"}}'::jsonb`);
      await db.query(`UPDATE runs SET spec = jsonb_set(spec, '{commands}', '["echo $GREETING"]') WHERE id = $1`, [runId]);
      const statements: string[] = [];
      const traced: Db = { ...db, query: (text, params) => { statements.push(text); return db.query(text, params); } };
      const start = new CountingStart(traced, 'server-a');
      await new Scheduler(db, pool, start).pass();
      await start.settle();
      expect(statements.filter((text) => /FROM (instances|fleets) WHERE id = \$1/.test(text))).to.deep.equal([]);
      const agentClient = new AgentClient(agent.url, agentToken);
      await waitForState(agentClient, runId, ['exited']);
      expect((await agentClient.logs(runId, 0)).entries.map((entry) => entry.text.trim())).to.include('from the fleet');
    });

    it('is started by any server\'s start loop once the lease of a placing server that died before starting it runs out', async () => {
      const died: PlacedRunStarter = { owner: 'server-a', leaseMs: 2000, startPlaced: () => {} };
      await new Scheduler(db, pool, died).pass();
      const [placed] = await db.query(`SELECT status, lease_owner FROM runs WHERE id = $1`, [runId]);
      expect(placed).to.deep.equal({ status: 'provisioning', lease_owner: 'server-a' });

      const other = new CountingStart(db, 'server-b');
      await other.pass();
      await other.settle();
      expect((await db.query(`SELECT status FROM runs WHERE id = $1`, [runId]))[0]!.status, 'while the lease holds').to.equal('provisioning');
      await eventually(async () => (await db.query(`SELECT lease_expires_at < now() AS out FROM runs WHERE id = $1`, [runId]))[0]!.out, 10_000, 'the lease to run out');
      await other.pass();
      await other.settle();
      expect((await db.query(`SELECT status, lease_owner FROM runs WHERE id = $1`, [runId]))[0]).to.deep.equal({ status: 'running', lease_owner: null });
    });

    it('gives its instance back for the next run as it ends, before the agent has removed its job', async () => {
      const proxy = await holdingRemovals(agent.url);
      const watch = new RunWatchController(db, 'server-a', winston.createLogger({ silent: true }), 1 << 20, new SecretBox(randomBytes(32)));
      try {
        await db.query(`UPDATE instances SET agent_url = $2 WHERE id = $1`, [instanceId, proxy.url]);
        await db.query(`UPDATE runs SET spec = jsonb_set(spec, '{commands}', '["sleep 1"]') WHERE id = $1`, [runId]);
        const start = new CountingStart(db, 'server-a');
        await new Scheduler(db, pool, start).pass();
        await start.settle();
        await waitForState(new AgentClient(agent.url, agentToken), runId, ['exited']);
        await eventually(async () => {
          await watch.pass();
          return proxy.held() > 0;
        }, 10_000, 'the run to end and its job\'s removal to be sent');
        expect((await db.query(`SELECT status FROM runs WHERE id = $1`, [runId]))[0]!.status).to.equal('done');
        expect((await db.query(`SELECT status, run_id FROM instances WHERE id = $1`, [instanceId]))[0]).to.deep.equal({ status: 'idle', run_id: null });
      } finally {
        proxy.release();
        await watch.settle();
        await proxy.close();
      }
    });
  });
}
