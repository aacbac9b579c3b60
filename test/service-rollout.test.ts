import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AgentClient } from '../agent/client.js';
import type { Run } from '../api/objects.js';
import { LocalBackend } from '../backends/local/local.js';
import { addProject, CLI_MAIN, endCliSuite, makeHome, runCli, show, startLocalCliSuite, type LocalCliSuite } from './helpers/cli.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { startLoad, type Load } from './helpers/load.js';
import { freePort } from './helpers/ports.js';
import { eventually, LOCAL_CONFIG } from './helpers/server.js';

const REPO = resolve(import.meta.dirname, '..');
const NAME = 'web';
const MODELS = `/proxy/services/main/${NAME}/v1/models`;

/** The echo-llm server as service `web`, its model named after its version, so that an answer says which generation gave it. */
function serviceSpec(version: string, changes: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    type: 'service', name: NAME, port: 8000, files: ['echo-llm/server.mjs'], commands: ['node echo-llm/server.mjs'],
    env: { MODEL: version }, replicas: 2, probes: [{ type: 'http', url: '/health', interval: '1s' }], ...changes,
  };
}

for (const kind of DATABASE_KINDS) {
  describe(`a failed service update keeps the old generation serving (${kind})`, function () {
    this.timeout(400_000);
    let suite: LocalCliSuite;
    let load: Load | null = null;
    // Wide enough for ps to show whole messages.
    const cli = (args: string[]) => runCli(args, { home: suite.home.home, cwd: suite.work, timeoutMs: 180_000, env: { COLUMNS: '400' } });
    /** Writes the spec to `<version>.yml` and applies it attached, as a user would. */
    const apply = (spec: Record<string, unknown>, file: string) => {
      writeFileSync(join(suite.work, file), JSON.stringify(spec));
      return cli(['apply', '-f', file, '-y']);
    };
    const view = async () => (await suite.server.api('GET', `/api/projects/main/runs/${NAME}`)).body as Run;
    const loadOf = (expectBody: RegExp) => startLoad(`${suite.server.url}${MODELS}`, { token: suite.server.adminToken, workers: 2, pauseMs: 20, expectBody });
    /** The ids of the replicas serving now, to tell that none was restarted. */
    const servingIds = async () => (await suite.server.db.query(
      `SELECT id FROM runs WHERE service_id IS NOT NULL AND ready_at IS NOT NULL AND status = 'running' ORDER BY id`)).map((r) => r.id as string);
    const replicaRows = async (generation: number) => (await suite.server.db.query(
      `SELECT count(*)::int AS n FROM runs WHERE service_id IS NOT NULL AND generation = $1 AND NOT deleted`, [generation]))[0].n as number;

    before(async function () {
      this.timeout(120_000);
      suite = await startLocalCliSuite(kind);
      cpSync(join(REPO, 'examples', 'services', 'echo-llm'), join(suite.work, 'echo-llm'), { recursive: true });
    });
    beforeEach(async () => {
      const first = await apply(serviceSpec('v1'), 'v1.yml');
      expect(first.code, show(first)).to.equal(0);
      await eventually(async () => (await view()).service!.replicas.filter((r) => r.state === 'ready').length === 2, 60_000, 'two ready replicas');
    });
    afterEach(async function () {
      this.timeout(60_000);
      await load?.stop();
      load = null;
      await cli(['stop', NAME]);
    });
    after(async function () {
      this.timeout(60_000);
      await endCliSuite(suite?.server, suite?.home, suite?.work);
    });

    it('answers every request from generation 1 while generation 2 exits at once, then rolls forward to a fixed generation 3 without a failed request', async () => {
      load = loadOf(/"id":"v1"/);
      const broken = await apply(serviceSpec('v2', { commands: ['exit 1'] }), 'v2.yml');
      expect(broken.code, show(broken)).to.equal(1);
      expect(broken.stderr, show(broken)).to.contain('error: web: rollout of generation 2 failed: 3 replicas in a row ended before becoming ready; the last: exited with code 1; generation 1 still serves 2 replicas\n');
      expect(broken.stderr).to.contain('orchestrator service rollback web');
      // The window the issue asks for on one database; the other runs the same steps over a shorter one.
      const holdUntil = Date.now() + (kind === 'pglite' ? 60_000 : 15_000);

      // A replica of generation 1 that dies meanwhile is replaced by one of generation 1, not of the stalled generation 2.
      const [victim] = await suite.server.db.query(
        `SELECT r.id, i.agent_url, i.agent_token FROM runs r JOIN instances i ON i.id = r.instance_id
         WHERE r.service_id IS NOT NULL AND r.generation = 1 AND r.ready_at IS NOT NULL AND r.status = 'running' LIMIT 1`);
      await new AgentClient(victim.agent_url, victim.agent_token).stop(victim.id, { abort: true });
      await eventually(async () => {
        const replicas = (await view()).service!.replicas;
        return replicas.filter((r) => r.state === 'ready' && r.generation === 1).length === 2 && !(await servingIds()).includes(victim.id);
      }, 60_000, 'a replacement of generation 1');
      await sleep(holdUntil - Date.now());

      const ps = await cli(['ps']);
      expect(ps.code, show(ps)).to.equal(0);
      expect(ps.stdout).to.match(/^web\s+service\s+running \(2\/2 ready[^)]*\)\s.*rollout of generation 2 failed: 3 replicas in a row ended before becoming ready; the last: exited with code 1; generation 1 still serves 2 replicas$/m);
      const run = await view();
      expect(run.status).to.equal('running');
      expect(run.service!.stall).to.deep.include({ generation: 2, reason: 'failing' });
      expect(run.service!.stableGeneration).to.equal(1);
      expect(await replicaRows(2), 'replicas of generation 2 started').to.equal(3);
      expect(await replicaRows(1), 'replicas of generation 1 started').to.equal(3);
      const events = await cli(['events']);
      expect(events.stdout).to.match(/RolloutFailed.*rollout of generation 2 failed/);
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
      expect(load.statuses.get(200)).to.be.greaterThan(50);

      load = loadOf(/"id":"v[13]"/);
      const fixed = await apply(serviceSpec('v3'), 'v3.yml');
      expect(fixed.code, show(fixed)).to.equal(0);
      const rolled = await eventually(async () => {
        const current = await view();
        const ready = current.service!.replicas.filter((r) => r.state === 'ready');
        return ready.length === 2 && current.service!.replicas.length === 2 && ready.every((r) => r.generation === 3) ? current : null;
      }, 120_000, 'generation 3 on both replicas');
      expect(rolled.service!.stall).to.equal(null);
      expect(rolled.statusMessage).to.equal('2/2 replicas ready');
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
    });

    it('stalls a generation whose probe never passes within startup_timeout, and service rollback puts generation 1 back without restarting it', async () => {
      const serving = await servingIds();
      load = loadOf(/"id":"v1"/);
      const broken = await apply(serviceSpec('v2', { startup_timeout: '3s', probes: [{ type: 'http', url: '/nowhere', interval: '1s' }] }), 'v2.yml');
      expect(broken.code, show(broken)).to.equal(1);
      expect(broken.stderr, show(broken)).to.match(/^error: web: rollout of generation 2 failed: 3 replicas in a row did not become ready; the last: not ready within 3s of starting: GET \/nowhere answered 404; generation 1 still serves 2 replicas$/m);
      await sleep(5000);
      expect((await view()).status).to.equal('running');

      const rollback = await cli(['service', 'rollback', NAME]);
      expect(rollback.code, show(rollback)).to.equal(0);
      expect(rollback.stdout).to.equal('web: back to generation 1\n');
      const back = await view();
      expect(back.generation).to.equal(1);
      expect(back.service!.stall).to.equal(null);
      expect(back.spec.probes).to.deep.equal([{ type: 'http', url: '/health', interval: '1s' }]);
      await eventually(async () => (await view()).statusMessage === '2/2 replicas ready', 10_000, 'the status to settle');
      await sleep(3000);
      expect(await servingIds()).to.deep.equal(serving);
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);

      const again = await cli(['service', 'rollback', NAME]);
      expect(again.code, show(again)).to.equal(1);
      expect(again.stderr).to.equal('error: web already runs generation 1, the last that was ready\n');
    });

    it('sends requests to each replica on its own generation\'s port while a generation with a wrong port stalls', async () => {
      load = loadOf(/"id":"v1"/);
      // The server keeps listening where it did (or cannot, when another replica holds that port on this machine).
      const typo = serviceSpec('v2', { port: 8001, commands: ['PORT=8000 node echo-llm/server.mjs'], startup_timeout: '3s' });
      const broken = await apply(typo, 'v2.yml');
      expect(broken.code, show(broken)).to.equal(1);
      expect(broken.stderr, show(broken)).to.match(/^error: web: rollout of generation 2 failed: 3 replicas in a row (did not become|ended before becoming) ready; .+; generation 1 still serves 2 replicas$/m);
      const rollback = await cli(['service', 'rollback', NAME]);
      expect(rollback.code, show(rollback)).to.equal(0);
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
      expect(load.statuses.get(200)).to.be.greaterThan(20);
    });

    it('waits for a generation that cannot be placed while generation 1 serves, and settles on generation 1 when its spec is applied again', async () => {
      const serving = await servingIds();
      load = loadOf(/"id":"v1"/);
      const unplaceable = await apply(serviceSpec('v2', { resources: { gpu: 'H100' } }), 'v2.yml');
      expect(unplaceable.code, show(unplaceable)).to.equal(1);
      expect(unplaceable.stderr).to.match(/^error: web: rollout of generation 2 waits: replica 2 cannot be placed: .+; trying again every 30s; generation 1 still serves 2 replicas$/m);
      await sleep(5000);
      const ps = await cli(['ps']);
      expect(ps.stdout).to.match(/^web\s+service\s+running \(2\/2 ready[^)]*\)\s.*rollout of generation 2 waits: /m);

      const settled = await apply(serviceSpec('v1'), 'v1.yml');
      expect(settled.code, show(settled)).to.equal(0);
      expect(settled.stdout).to.equal(`Service:  ${suite.server.url}/proxy/services/main/web/\n`);
      const back = await view();
      expect(back.generation).to.equal(1);
      expect(back.service!.stall).to.equal(null);
      await sleep(3000);
      expect(await servingIds()).to.deep.equal(serving);
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
    });

    it('stalls a generation whose replica is still queued for a place after startup_timeout, while generation 1 serves', async () => {
      load = loadOf(/"id":"v1"/);
      const queued = await apply(serviceSpec('v2', { fleets: ['reserved'], startup_timeout: '3s' }), 'v2.yml');
      expect(queued.code, show(queued)).to.equal(1);
      expect(queued.stderr).to.match(/^error: web: rollout of generation 2 waits: replica 2 not placed within 3s: waiting: no fleet among fleets: \[reserved\]: .+; it stays in the queue; generation 1 still serves 2 replicas$/m);
      const run = await view();
      expect(run.service!.stall).to.deep.include({ generation: 2, reason: 'unplaceable' });
      expect(run.service!.replicas.filter((r) => r.generation === 2).map((r) => r.state)).to.deep.equal(['provisioning']);

      const settled = await apply(serviceSpec('v1'), 'v1.yml');
      expect(settled.code, show(settled)).to.equal(0);
      expect((await view()).service!.stall).to.equal(null);
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
    });

    it('keeps a service up whose scale-up replicas keep failing, and says so', async () => {
      const marker = join(suite.work, `first-replica-${Date.now()}`);
      const once = serviceSpec('v1', { replicas: 1, commands: [`if [ -e ${marker} ]; then exit 1; fi`, `touch ${marker}`, 'node echo-llm/server.mjs'] });
      const replaced = await apply(once, 'once.yml');
      expect(replaced.code, show(replaced)).to.equal(0);
      await eventually(async () => {
        const run = await view();
        return run.service!.replicas.length === 1 && run.service!.replicas[0]!.generation === 2 && run.service!.replicas[0]!.state === 'ready' && run.service!.stableGeneration === 2;
      }, 90_000, 'one ready replica of generation 2');
      load = loadOf(/"id":"v1"/);
      const scaled = await apply({ ...once, replicas: 2 }, 'once.yml');
      expect(scaled.code, show(scaled)).to.equal(0);
      const stalled = await eventually(async () => {
        const run = await view();
        return run.service!.stall ? run : null;
      }, 60_000, 'the scale-up to stall');
      expect(stalled.status).to.equal('running');
      expect(stalled.statusMessage).to.match(/^replicas of generation 2 keep failing: 3 replicas in a row ended before becoming ready; the last: exited with code 1; trying again; generation 2 still serves 1 replica$/);
      const ps = await cli(['ps']);
      expect(ps.stdout).to.match(/^web\s+service\s+running \(1\/2 ready[^)]*\)\s.*replicas of generation 2 keep failing: /m);
      await sleep(5000);
      expect((await view()).status).to.equal('running');
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
    });
  });
}

for (const kind of DATABASE_KINDS) {
  describe(`a stalled rollout across a server killed with SIGKILL (${kind})`, function () {
    this.timeout(300_000);
    const token = 'crash-admin';
    let dir: string;
    let home: ReturnType<typeof makeHome>;
    let database: { url: string; drop(): Promise<void> } | null = null;
    let server: ChildProcess | undefined;
    let url: string;
    const cli = (args: string[], cwd = dir) => runCli(args, { home: home.home, cwd, timeoutMs: 180_000, env: { COLUMNS: '400' } });
    const api = async (method: string, path: string) => {
      const response = await fetch(`${url}${path}`, { method, headers: { authorization: `Bearer ${token}` } });
      return response.json() as Promise<any>;
    };

    const startServerProcess = async (port: number) => {
      server = spawn(process.execPath, [CLI_MAIN, 'server', '--port', String(port)], {
        env: { ...process.env, ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_SERVER_ADMIN_TOKEN: token, ORCHESTRATOR_DATABASE_URL: database?.url ?? '', ORCHESTRATOR_LOG_LEVEL: 'error' },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      await new Promise<void>((resolvePromise, reject) => {
        let out = '';
        server!.stdout!.on('data', (d) => { out += d; if (out.includes('Server URL')) resolvePromise(); });
        server!.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
      });
    };

    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'orch-rollout-crash-'));
      writeFileSync(join(dir, 'config.yml'), LOCAL_CONFIG);
      cpSync(join(REPO, 'examples', 'services', 'echo-llm'), join(dir, 'echo-llm'), { recursive: true });
      if (kind === 'postgres') database = await createScratchDatabase();
      home = makeHome();
    });
    after(async function () {
      this.timeout(60_000);
      if (server && server.exitCode === null) {
        await cli(['stop', NAME]).catch(() => undefined);
        await api('DELETE', '/api/projects/main/fleets/local').catch(() => undefined);
        await eventually(async () => (await api('GET', '/api/projects/main/instances')).length === 0, 20_000, 'every instance to end').catch(() => undefined);
        server.kill('SIGKILL');
      }
      const local = new LocalBackend({ stateDir: join(dir, 'backends', 'local') });
      for (const instance of await local.list().catch(() => [])) await local.terminate(instance.id);
      await database?.drop();
      home?.remove();
      rmSync(dir, { recursive: true, force: true });
    });

    it('comes back with the same stall, starts no replica of the stalled generation, and generation 1 serves on', async () => {
      const port = await freePort();
      url = `http://127.0.0.1:${port}`;
      await startServerProcess(port);
      await addProject(home.home, url, token);
      expect((await cli(['apply', '-f', 'examples/fleets/local.yml', '-y'], REPO)).code).to.equal(0);
      writeFileSync(join(dir, 'v1.yml'), JSON.stringify(serviceSpec('v1')));
      const first = await cli(['apply', '-f', 'v1.yml', '-y']);
      expect(first.code, show(first)).to.equal(0);
      // The apply returns once one replica serves; a generation 1 replica not yet ready would be replaced by the rollout.
      await eventually(async () => (await api('GET', `/api/projects/main/runs/${NAME}`) as Run).service!.replicas.filter((r) => r.state === 'ready').length === 2, 60_000, 'two ready replicas');
      writeFileSync(join(dir, 'v2.yml'), JSON.stringify(serviceSpec('v2', { commands: ['exit 1'] })));
      const broken = await cli(['apply', '-f', 'v2.yml', '-y']);
      expect(broken.code, show(broken)).to.equal(1);
      const secondGenerationAdded = async () => ((await api('GET', '/api/projects/main/events')) as Array<{ reason: string; message: string }>)
        .filter((e) => e.reason === 'ReplicaAdded' && e.message.includes('(generation 2)')).length;
      const before = await api('GET', `/api/projects/main/runs/${NAME}`) as Run;
      expect(before.service!.stall).to.deep.include({ generation: 2, reason: 'failing' });
      expect(await secondGenerationAdded()).to.equal(3);

      server!.kill('SIGKILL');
      await new Promise((r) => server!.once('exit', r));
      await startServerProcess(port);
      await sleep(8000);

      const after = await api('GET', `/api/projects/main/runs/${NAME}`) as Run;
      expect(after).to.deep.include({ status: 'running', generation: 2, statusMessage: before.statusMessage });
      expect(after.statusMessage).to.equal('rollout of generation 2 failed: 3 replicas in a row ended before becoming ready; the last: exited with code 1; generation 1 still serves 2 replicas');
      expect(after.service!.stall).to.deep.equal(before.service!.stall);
      expect(after.service!.replicas.map((r) => [r.replica, r.generation, r.state])).to.deep.equal(before.service!.replicas.map((r) => [r.replica, r.generation, r.state]));
      expect(await secondGenerationAdded()).to.equal(3);
      const ps = await cli(['ps']);
      expect(ps.stdout).to.match(/^web\s+service\s+running \(2\/2 ready[^)]*\)\s.*rollout of generation 2 failed: /m);
      const load = startLoad(`${url}${MODELS}`, { token, workers: 2, expectBody: /"id":"v1"/ });
      await sleep(2000);
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
    });
  });
}
