import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { startServer, type RunningServer } from '../server/server.js';
import { migrate } from '../store/migrations.js';
import { openPostgres } from '../store/postgres.js';
import { upsertUser } from '../store/projects.js';
import { createScratchDatabase } from './helpers/databases.js';
import { eventually, FAST_TIMINGS, gpucloudConfig } from './helpers/server.js';

const TASKS = 6;

describe('two servers on one Postgres database', function () {
  this.timeout(120_000);
  let emulator: RunningEmulator;
  let database: { url: string; drop(): Promise<void> };
  const servers: RunningServer[] = [];
  const dirs: string[] = [];

  before(async () => {
    emulator = await startEmulator({ port: 0, bootDelayMs: 100, apiKey: 'shared-key-123456' });
    database = await createScratchDatabase();
    for (let i = 0; i < 2; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'orch-replica-'));
      writeFileSync(join(dir, 'config.yml'), gpucloudConfig(emulator.url, emulator.apiKey));
      dirs.push(dir);
      servers.push(await startServer({ port: 0, dir, databaseUrl: database.url, adminToken: 'shared-admin', logLevel: 'error', instanceTimings: FAST_TIMINGS, controllerIntervalMs: 200 }));
    }
  });
  after(async () => {
    for (const server of servers) await server.close();
    await emulator.close();
    await database.drop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  const api = async (server: RunningServer, method: string, path: string, body?: unknown) => {
    const response = await fetch(`${server.url}/api/projects/main${path}`, { method, headers: { authorization: 'Bearer shared-admin' }, body: body ? JSON.stringify(body) : undefined });
    return { status: response.status, body: response.status === 204 ? null : await response.json() as any };
  };

  it('runs every task once and never provisions more than nodes.max, whichever server takes the work', async () => {
    await api(servers[0], 'POST', '/fleets/apply', { spec: { type: 'fleet', name: 'shared', backends: ['gpucloud'], nodes: '0..3', idle_duration: '1m', resources: { gpu: 'L4:1' } } });
    for (let i = 0; i < TASKS; i++) {
      const applied = await api(servers[i % 2], 'POST', '/runs/apply', { spec: { type: 'task', name: `t${i}`, commands: [`echo task ${i}`, 'sleep 1'] } });
      expect(applied.status).to.equal(201);
    }
    const runs = await eventually(async () => {
      const { body } = await api(servers[1], 'GET', '/runs?all=true');
      return body.length === TASKS && body.every((r: { status: string }) => r.status === 'done') ? body : null;
    }, 90_000, 'every task done');
    expect(runs).to.have.length(TASKS);
    for (let i = 0; i < TASKS; i++) {
      const { body: logs } = await api(servers[i % 2], 'GET', `/runs/t${i}/logs`);
      expect(logs.lines.map((l: { text: string }) => l.text)).to.deep.equal([`task ${i}`]);
      const { body: events } = await api(servers[0], 'GET', `/events?object=t${i}`);
      expect(events.filter((e: { reason: string }) => e.reason === 'Running')).to.have.length(1);
    }
    const state = await (await fetch(`${emulator.url}/_emulator/state`, { headers: { authorization: `Bearer ${emulator.apiKey}` } })).json() as { instances: unknown[] };
    expect(state.instances.length).to.be.within(1, 3);
    const { body: instances } = await api(servers[0], 'GET', '/instances?all=true');
    expect(instances.length).to.equal(state.instances.length);

    await api(servers[1], 'DELETE', '/fleets/shared');
    await eventually(async () => (await api(servers[0], 'GET', '/instances')).body.length === 0, 30_000, 'instances released');
  });
});

describe('two servers starting at once on one Postgres database', () => {
  it('both set the admin token they were given, where the second insert of the same user would trip over its token', async () => {
    const database = await createScratchDatabase();
    const pools = [openPostgres(database.url), openPostgres(database.url)];
    try {
      await migrate(pools[0]!);
      for (let round = 0; round < 20; round++) {
        const [first, second] = await Promise.all(pools.map((db) => upsertUser(db, `admin-${round}`, `token-${round}`, 'admin')));
        expect(second!.id, `round ${round}`).to.equal(first!.id);
      }
      expect(await pools[1]!.query('SELECT count(*)::int AS n FROM users')).to.deep.equal([{ n: 20 }]);
    } finally {
      for (const db of pools) await db.close();
      await database.drop();
    }
  });
});
