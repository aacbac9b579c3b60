import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient } from '../agent/client.js';
import { startServer, type RunningServer } from '../server/server.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { startLoad } from './helpers/load.js';
import { eventually, FAST_TIMINGS, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';
import { applyItems, echoLlm, projectEvents, readyReplicas, runView, SERVICE_FLEET } from './helpers/services.js';

const MODELS = '/proxy/services/main/echo-llm/v1/models';

for (const kind of DATABASE_KINDS) {
  describe(`service traffic through the proxy (${kind})`, function () {
    this.timeout(180_000);
    let server: TestServer;
    const token = 'test-admin-token';

    beforeEach(async () => {
      server = await startTestServer(kind, LOCAL_CONFIG);
    });
    afterEach(async () => {
      await server?.stop();
    });

    it('keeps answering through a rolling update under load: zero failed requests', async () => {
      await applyItems(server.url, token, { spec: SERVICE_FLEET }, echoLlm({ replicas: 2, scaling: undefined }));
      await eventually(async () => readyReplicas(await runView(server.url, token)).length === 2, 60_000, 'two ready replicas');
      const load = startLoad(`${server.url}${MODELS}`, { token, workers: 4 });
      await new Promise((r) => setTimeout(r, 500));
      await applyItems(server.url, token, echoLlm({ replicas: 2, scaling: undefined, env: { MODEL: 'echo', TOKEN_DELAY_MS: '1' } }));
      await eventually(async () => {
        const run = await runView(server.url, token);
        return run.service!.replicas.length === 2 && readyReplicas(run).length === 2 && readyReplicas(run).every((r) => r.generation === 2);
      }, 120_000, 'generation 2 on both replicas');
      await new Promise((r) => setTimeout(r, 500));
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
      expect(load.statuses.get(200)).to.be.greaterThan(20);
    });

    it('replaces a replica whose process is killed while requests keep succeeding on the other', async () => {
      await applyItems(server.url, token, { spec: SERVICE_FLEET }, echoLlm({ replicas: 2, scaling: undefined }));
      await eventually(async () => readyReplicas(await runView(server.url, token)).length === 2, 60_000, 'two ready replicas');
      const load = startLoad(`${server.url}${MODELS}`, { token, workers: 4 });
      const [victim] = await server.db.query(
        `SELECT r.id, i.agent_url, i.agent_token FROM runs r JOIN instances i ON i.id = r.instance_id WHERE r.service_id IS NOT NULL AND r.replica = 0 AND r.status = 'running'`);
      await new AgentClient(victim.agent_url, victim.agent_token).stop(victim.id, { abort: true });
      await eventually(async () => {
        const run = await runView(server.url, token);
        return readyReplicas(run).length === 2 && !readyReplicas(run).some((r) => r.startedAt === null) && (await server.db.query(`SELECT 1 FROM runs WHERE id = $1 AND status IN ('failed', 'terminated')`, [victim.id])).length === 1;
      }, 60_000, 'a replacement replica');
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
    });

    it('scales from 1 to 3 replicas under load and back to 1 after the delay', async () => {
      const scaling = { metric: 'rps', target: 2, window: '5s', scale_up_delay: '0s', scale_down_delay: '5s' };
      await applyItems(server.url, token, { spec: SERVICE_FLEET }, echoLlm({ replicas: '1..3', scaling }));
      await eventually(async () => readyReplicas(await runView(server.url, token)).length === 1, 60_000, 'one ready replica');
      const load = startLoad(`${server.url}${MODELS}`, { token, workers: 2, pauseMs: 50 });
      const scaled = await eventually(async () => {
        const run = await runView(server.url, token);
        return readyReplicas(run).length === 3 ? run : null;
      }, 90_000, 'three ready replicas');
      expect(scaled.service!.desiredReplicas).to.equal(3);
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
      const back = await eventually(async () => {
        const run = await runView(server.url, token);
        return run.service!.desiredReplicas === 1 && run.service!.replicas.length === 1 ? run : null;
      }, 60_000, 'back to one replica');
      expect(readyReplicas(back)).to.have.length(1);
      const events = await projectEvents(server.url, token);
      const scalings = events.filter((e) => e.reason === 'Scaled').map((e) => e.message.split(' (')[0]);
      expect(scalings[0]).to.match(/^1 → [23] replicas$/);
      expect(scalings.some((m) => m.endsWith('→ 3 replicas')), scalings.join(', ')).to.equal(true);
      expect(scalings[scalings.length - 1]).to.match(/^[23] → 1 replica$/);
    });

    it('holds the first request to a service scaled to zero until a replica is ready', async () => {
      const scaling = { metric: 'rps', target: 5, window: '10s', scale_up_delay: '0s', scale_down_delay: '1h' };
      await applyItems(server.url, token, { spec: SERVICE_FLEET }, echoLlm({ replicas: '0..1', scaling, cold_start_timeout: '90s' }));
      const idle = await eventually(async () => {
        const run = await runView(server.url, token);
        return run.status === 'running' ? run : null;
      }, 30_000, 'the service to run at zero replicas');
      expect(idle.service!.replicas).to.deep.equal([]);
      const response = await fetch(`${server.url}${MODELS}`, { headers: { authorization: `Bearer ${token}` } });
      expect(response.status).to.equal(200);
      expect(((await response.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id)).to.deep.equal(['echo']);
      expect(readyReplicas(await runView(server.url, token))).to.have.length(1);
    });
  });
}

describe('two servers on one Postgres database share request counts', function () {
  this.timeout(180_000);
  const servers: RunningServer[] = [];
  const dirs: string[] = [];
  let database: { url: string; drop(): Promise<void> };

  before(async () => {
    database = await createScratchDatabase();
    for (let i = 0; i < 2; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'orch-replica-'));
      writeFileSync(join(dir, 'config.yml'), LOCAL_CONFIG);
      dirs.push(dir);
      servers.push(await startServer({ port: 0, dir, databaseUrl: database.url, adminToken: 'shared-admin', logLevel: 'error', instanceTimings: FAST_TIMINGS, controllerIntervalMs: 200 }));
    }
  });
  after(async () => {
    for (const server of servers) await server.close();
    for (const dir of dirs) {
      const { LocalBackend } = await import('../backends/local/local.js');
      const local = new LocalBackend({ stateDir: join(dir, 'backends', 'local') });
      for (const instance of await local.list().catch(() => [])) await local.terminate(instance.id);
      rmSync(dir, { recursive: true, force: true });
    }
    await database.drop();
  });

  it('scales on the sum of what both servers proxied', async () => {
    const scaling = { metric: 'rps', target: 4, window: '5s', scale_up_delay: '0s', scale_down_delay: '1h' };
    await applyItems(servers[0]!.url, 'shared-admin', { spec: SERVICE_FLEET }, echoLlm({ replicas: '1..2', scaling }));
    await eventually(async () => readyReplicas(await runView(servers[0]!.url, 'shared-admin')).length === 1, 60_000, 'one ready replica');
    const loads = servers.map((s) => startLoad(`${s.url}${MODELS}`, { token: 'shared-admin', workers: 1, pauseMs: 300 }));
    const scaled = await eventually(async () => {
      const run = await runView(servers[1]!.url, 'shared-admin');
      return run.service!.desiredReplicas === 2 ? run : null;
    }, 60_000, 'two replicas wanted');
    await Promise.all(loads.map((l) => l.stop()));
    expect(scaled.service!.desiredReplicas).to.equal(2);
    const sources = await servers[0]!.db.query(`SELECT DISTINCT source FROM service_stats`);
    expect(sources).to.have.length(2);
    for (const load of loads) expect(load.failures).to.deep.equal([]);
  });
});
