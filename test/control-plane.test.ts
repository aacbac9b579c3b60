import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { GpucloudBackend } from '../backends/gpucloud/client.js';
import { CONTROLLER_OWNER_FILE } from '../server/predecessor-leases.js';
import { openDatabase } from '../store/open.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { freePort } from './helpers/ports.js';
import { eventually, FAST_TIMINGS, gpucloudConfig, LOCAL_CONFIG, runReaches, startTestServer, type TestServer } from './helpers/server.js';

const task = (name: string, commands: string[], extra: Record<string, unknown> = {}) => ({ spec: { type: 'task', name, commands, ...extra } });
const gpucloudFleet = (extra: Record<string, unknown> = {}) => ({ spec: { type: 'fleet', name: 'cloud', backends: ['gpucloud'], nodes: '0..2', idle_duration: '1m', resources: { gpu: '24GB..' }, ...extra } });

for (const kind of DATABASE_KINDS) {
  describe(`control plane on ${kind}`, function () {
    this.timeout(90_000);

    describe('with the local backend', () => {
      let server: TestServer;
      before(async () => { server = await startTestServer(kind, LOCAL_CONFIG); });
      after(async () => {
        await server.api('DELETE', '/api/projects/main/fleets/local');
        await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.length === 0, 20_000, 'local instance to go');
        await server.stop();
      });

      it('runs a task on a fleet, keeps its logs in order and leaves the instance idle', async () => {
        expect((await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } })).status).to.equal(201);
        const applied = await server.api('POST', '/api/projects/main/runs/apply', task('hello', ['echo "gpus=$ORCHESTRATOR_GPUS_NUM run=$ORCHESTRATOR_RUN_NAME"', 'echo oops >&2', 'seq 1 300']));
        expect(applied.status).to.equal(201);
        const run = await runReaches(server, 'hello', ['done', 'failed']);
        expect(run).to.include({ status: 'done', exitCode: 0, terminationReason: 'done_by_user_code', instance: 'local-0', fleet: 'local' });
        const logs = (await server.api('GET', '/api/projects/main/runs/hello/logs')).body.lines;
        expect(logs.map((l: { seq: number }) => l.seq)).to.deep.equal(Array.from({ length: 302 }, (_, i) => i + 1));
        const stdout = logs.filter((l: { stream: string }) => l.stream === 'stdout').map((l: { text: string }) => l.text);
        expect(stdout).to.deep.equal(['gpus=0 run=hello', ...Array.from({ length: 300 }, (_, i) => String(i + 1))]);
        expect(logs.filter((l: { stream: string }) => l.stream === 'stderr').map((l: { text: string }) => l.text)).to.deep.equal(['oops']);
        const instances = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/instances');
          return body[0]?.status === 'idle' ? body : null;
        }, 10_000, 'instance idle');
        expect(instances).to.have.length(1);
        const reasons = (await server.api('GET', '/api/projects/main/events?object=hello')).body.map((e: { reason: string }) => e.reason);
        expect(reasons).to.deep.equal(['Submitted', 'Provisioning', 'Running', 'Done']);
      });

      it('ends a task that exits 3 as failed with its exit code', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('three', ['echo before', 'exit 3']));
        const run = await runReaches(server, 'three', ['done', 'failed']);
        expect(run).to.include({ status: 'failed', exitCode: 3, terminationReason: 'failed_by_user_code' });
      });

      it('queues a second task behind a one-node fleet with a visible reason, then runs it', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('first', ['sleep 2', 'echo first']));
        await runReaches(server, 'first', ['running']);
        await server.api('POST', '/api/projects/main/runs/apply', task('second', ['echo second']));
        const waiting = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/runs/second');
          return body.statusMessage.includes('maximum of 1 node') ? body : null;
        }, 10_000, 'queue reason');
        expect(waiting).to.include({ status: 'submitted', queuePosition: 1 });
        const second = await runReaches(server, 'second', ['done', 'failed']);
        expect(second.status).to.equal('done');
        const first = (await server.api('GET', '/api/projects/main/runs/first')).body;
        expect(new Date(second.startedAt).getTime()).to.be.greaterThanOrEqual(new Date(first.finishedAt).getTime());
      });

      it('stops a running task and keeps the lines it printed before the stop', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('sleeper', ['echo started', 'sleep 60']));
        await runReaches(server, 'sleeper', ['running']);
        await eventually(async () => (await server.api('GET', '/api/projects/main/runs/sleeper/logs')).body.lines.length > 0, 10_000, 'first line');
        expect((await server.api('POST', '/api/projects/main/runs/sleeper/stop', {})).status).to.equal(202);
        const run = await runReaches(server, 'sleeper', ['terminated', 'failed', 'done']);
        expect(run).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
        expect((await server.api('GET', '/api/projects/main/runs/sleeper/logs')).body.lines.map((l: { text: string }) => l.text)).to.deep.equal(['started']);
      });

      it('stops a task that runs past its max_duration', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('overtime', ['echo begun', 'sleep 60'], { max_duration: '2s' }));
        const run = await runReaches(server, 'overtime', ['terminated', 'failed', 'done'], 30_000);
        expect(run).to.include({ status: 'terminated', terminationReason: 'max_duration_exceeded' });
        expect(new Date(run.finishedAt).getTime() - new Date(run.startedAt).getTime()).to.be.within(2000, 15_000);
        expect((await server.api('GET', '/api/projects/main/runs/overtime/logs')).body.lines.map((l: { text: string }) => l.text)).to.deep.equal(['begun']);
      });

      it('deletes a fleet only once its busy instance has finished its run', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('last', ['sleep 2', 'echo finished']));
        await runReaches(server, 'last', ['running']);
        expect((await server.api('DELETE', '/api/projects/main/fleets/local')).status).to.equal(202);
        const deleting = (await server.api('GET', '/api/projects/main/fleets/local')).body;
        expect(deleting.status).to.equal('terminating');
        const again = await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } });
        expect(again.status, 'applied over a fleet being deleted, it would vanish with it').to.equal(409);
        expect(again.body.error.message).to.match(/^fleet local is being deleted \(.+\); apply it again once it is gone$/);
        const run = await runReaches(server, 'last', ['done', 'failed', 'terminated']);
        expect(run.status).to.equal('done');
        const [instance] = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/instances?all=true');
          return body.length && body.every((i: { status: string }) => i.status === 'terminated') ? body : null;
        }, 15_000, 'instance terminated');
        expect(instance.terminationReason).to.equal('fleet_deleted');
        await eventually(async () => (await server.api('GET', '/api/projects/main/fleets/local')).status === 404, 10_000, 'fleet gone');
        expect((await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } })).status).to.equal(201);
      });

      it('fails a run whose fleet has no offer for it, saying so', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('big', ['true'], { resources: { gpu: 'H100:8' } }));
        const run = await runReaches(server, 'big', ['failed']);
        expect(run.terminationReason).to.equal('no_offers');
        expect(run.statusMessage).to.equal('no offers: no local offer matches H100:8 in fleet local (no backend offers H100: they offer no GPUs at all)');
      });
    });

    describe('with the gpucloud emulator', () => {
      let emulator: RunningEmulator;
      let server: TestServer;
      beforeEach(async () => {
        emulator = await startEmulator({ port: 0, bootDelayMs: 100, apiKey: 'test-key-123456' });
        server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey));
      });
      afterEach(async () => {
        await server.stop();
        await emulator.close();
      });

      it('provisions the cheapest matching offer and releases the instance after idle_duration', async () => {
        await server.api('POST', '/api/projects/main/fleets/apply', gpucloudFleet({ idle_duration: '2s' }));
        await server.api('POST', '/api/projects/main/runs/apply', task('hello', ['echo gpus=$ORCHESTRATOR_GPUS_NUM']));
        const run = await runReaches(server, 'hello', ['done', 'failed']);
        expect(run).to.include({ status: 'done' });
        expect(run.gpu).to.include({ name: 'L4', count: 1 });
        expect((await server.api('GET', '/api/projects/main/runs/hello/logs')).body.lines[0].text).to.equal('gpus=1');
        const gone = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/instances?all=true');
          return body[0]?.status === 'terminated' ? body[0] : null;
        }, 15_000, 'idle instance terminated');
        expect(gone.terminationReason).to.equal('idle_timeout');
        const cloud = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey });
        expect((await cloud.list()).filter((i) => i.status !== 'terminated')).to.have.length(0);
      });

      it('provisions nodes.target instances on apply, then releases the idle ones down to nodes.min', async () => {
        const fleet = gpucloudFleet({ nodes: { min: 1, target: 3, max: 4 }, idle_duration: '2s' });
        expect((await server.api('POST', '/api/projects/main/fleets/apply', fleet)).status).to.equal(201);
        const live = async () => (await server.api('GET', '/api/projects/main/instances')).body.filter((i: { status: string }) => i.status !== 'terminating');
        const all = async () => (await server.api('GET', '/api/projects/main/instances?all=true')).body as { status: string; terminationReason: string | null }[];
        const ended = await eventually(async () => {
          const instances = await all();
          const terminated = instances.filter((i) => i.status === 'terminated');
          return instances.length === 3 && terminated.length === 2 ? terminated : null;
        }, 60_000, 'three instances, then the idle ones above nodes.min released');
        expect(ended.map((i) => i.terminationReason)).to.deep.equal(['idle_timeout', 'idle_timeout']);
        expect(await live(), 'nodes.min kept').to.have.length(1);
        const created = (await server.api('GET', '/api/projects/main/events')).body.filter((e: { reason: string; objectKind: string }) => e.reason === 'Created' && e.objectKind === 'instance');
        expect(created.map((e: { message: string }) => e.message)).to.deep.equal(Array(3).fill('created to bring fleet cloud to nodes.target=3'));
        // The same spec again changes nothing: target is provisioned when the fleet is created or changed, as in dstack.
        expect((await server.api('POST', '/api/projects/main/fleets/apply', fleet)).status).to.equal(200);
        await new Promise((resolve) => setTimeout(resolve, 1500));
        expect(await all()).to.have.length(3);
        const changed = gpucloudFleet({ nodes: { min: 1, target: 2, max: 4 }, idle_duration: '2s' });
        await server.api('POST', '/api/projects/main/fleets/apply', changed);
        await eventually(async () => (await all()).length === 4, 30_000, 'a changed fleet brought to its target again');
        expect((await server.api('GET', '/api/projects/main/fleets/cloud')).body.spec.nodes).to.deep.equal({ min: 1, target: 2, max: 4 });
      });

      it('places a run that names its instances only on those, waiting while they are busy and provisioning none, and fails one naming none there', async () => {
        await server.api('POST', '/api/projects/main/fleets/apply', gpucloudFleet());
        await server.api('POST', '/api/projects/main/runs/apply', task('first', ['sleep 5']));
        await runReaches(server, 'first', ['running'], 60_000);
        expect((await server.api('POST', '/api/projects/main/runs/apply', task('pinned', ['echo pinned'], { instances: [{ fleet: 'cloud', instance: 0 }] }))).status).to.equal(201);
        const waiting = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/runs/pinned');
          return body.statusMessage.startsWith('waiting: ') ? body : null;
        }, 10_000, 'pinned to wait');
        expect(waiting.statusMessage).to.equal('waiting: the run takes only the instances it names (cloud instance 0), and none is free now: cloud-0 busy');
        const done = await runReaches(server, 'pinned', ['done', 'failed'], 60_000);
        expect(done).to.include({ status: 'done', instance: 'cloud-0' });
        expect((await server.api('GET', '/api/projects/main/instances?all=true')).body.map((i: { name: string }) => i.name), 'no instance provisioned for it').to.deep.equal(['cloud-0']);
        await server.api('POST', '/api/projects/main/runs/apply', task('nowhere', ['true'], { instances: ['cloud-5'] }));
        const failed = await runReaches(server, 'nowhere', ['failed', 'done']);
        expect(failed).to.include({ status: 'failed', terminationReason: 'no_fleet_matches' });
        expect(failed.statusMessage).to.equal('no instance matches instances (cloud-5): the run is placed only on the existing instances it names, and none is provisioned for it');
      });

      it('fails a run that no fleet can host, saying what it needs and what the fleets offer', async () => {
        await server.api('POST', '/api/projects/main/fleets/apply', gpucloudFleet());
        await server.api('POST', '/api/projects/main/runs/apply', task('small', ['true'], { resources: { gpu: { memory: '..16GB' } } }));
        const run = await runReaches(server, 'small', ['failed']);
        expect(run.terminationReason).to.equal('no_fleet_matches');
        expect(run.statusMessage).to.match(/^no fleet matches: the run needs .*16GB.*; the fleets offer cloud \(.*24GB.*\)$/);
      });

      it('fails the run with a reason when its instance vanishes, and terminates the instance', async () => {
        await server.api('POST', '/api/projects/main/fleets/apply', gpucloudFleet());
        await server.api('POST', '/api/projects/main/runs/apply', task('doomed', ['echo working', 'sleep 60']));
        await runReaches(server, 'doomed', ['running']);
        const cloud = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey });
        const [machine] = await cloud.list();
        await emulator.faults.killInstance(machine.id);
        const run = await runReaches(server, 'doomed', ['failed', 'done', 'terminated']);
        expect(run).to.include({ status: 'failed', terminationReason: 'instance_unreachable' });
        const [instance] = (await server.api('GET', '/api/projects/main/instances?all=true')).body;
        expect(instance).to.include({ status: 'terminated', terminationReason: 'terminated_by_backend' });
      });

      it('gives up on an instance that does not boot in time and puts its run back in the queue', async () => {
        await server.stop();
        await emulator.close();
        emulator = await startEmulator({ port: 0, bootDelayMs: 60_000, apiKey: 'test-key-123456' });
        server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey), { instanceTimings: { ...FAST_TIMINGS, provisioningTimeoutMs: 1500 } });
        await server.api('POST', '/api/projects/main/fleets/apply', gpucloudFleet());
        await server.api('POST', '/api/projects/main/runs/apply', task('slowboot', ['true']));
        const instance = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/instances?all=true');
          return body.find((i: { status: string }) => i.status === 'terminated');
        }, 20_000, 'instance given up');
        expect(instance.terminationReason).to.equal('provisioning_timeout');
        const run = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/runs/slowboot');
          return body.statusMessage.includes('back in the queue') ? body : null;
        }, 10_000, 'run requeued');
        expect(run.status).to.equal('submitted');
        await server.api('POST', '/api/projects/main/runs/slowboot/stop', {});
        await runReaches(server, 'slowboot', ['terminated']);
        // The machine it gave up on is terminated at gpucloud too, not only in our records.
        const [{ backend_instance_id: machine }] = await server.db.query('SELECT backend_instance_id FROM instances WHERE id = $1', [instance.id]);
        const cloud = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey });
        await eventually(async () => (await cloud.get(machine)).status === 'terminated', 10_000, 'timed-out machine terminated');
      });

      it('moves on to the next offer when the cheapest one has no capacity at create time', async () => {
        await server.api('POST', '/api/projects/main/fleets/apply', gpucloudFleet());
        await server.api('POST', '/api/projects/main/runs/plan', task('capacity', ['true']));
        emulator.faults.noCapacity.add('L4');
        await server.api('POST', '/api/projects/main/runs/apply', task('capacity', ['echo ok']));
        const run = await runReaches(server, 'capacity', ['done', 'failed']);
        expect(run.status).to.equal('done');
        expect(run.gpu.name).to.not.equal('L4');
        const events = (await server.api('GET', '/api/projects/main/events')).body;
        expect(events.some((e: { reason: string; message: string }) => e.reason === 'NoCapacity' && e.message.includes('trying the next offer'))).to.equal(true);
      });
    });

    describe('across a server crash', () => {
      let emulator: RunningEmulator;
      let dir: string;
      let databaseUrl: string | undefined;
      let dropDatabase: (() => Promise<void>) | undefined;
      let child: ChildProcess | undefined;

      before(async () => {
        emulator = await startEmulator({ port: 0, bootDelayMs: 100, apiKey: 'crash-key-123456' });
        dir = mkdtempSync(join(tmpdir(), 'orch-crash-'));
        writeFileSync(join(dir, 'config.yml'), gpucloudConfig(emulator.url, emulator.apiKey));
        if (kind === 'postgres') ({ url: databaseUrl, drop: dropDatabase } = await createScratchDatabase());
      });
      after(async () => {
        child?.kill('SIGKILL');
        await emulator.close();
        await dropDatabase?.();
        rmSync(dir, { recursive: true, force: true });
      });

      let port = 0;
      beforeEach(async () => { port = await freePort(); });
      // The next test starts its own server on the same folder and database.
      afterEach(async () => {
        if (!child || child.exitCode !== null || child.signalCode !== null) return;
        const exited = new Promise((r) => child!.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      });
      const api = async (method: string, path: string, body?: unknown) => {
        const response = await fetch(`http://127.0.0.1:${port}${path}`, { method, headers: { authorization: 'Bearer crash-admin' }, body: body ? JSON.stringify(body) : undefined });
        return { status: response.status, body: response.status === 204 ? null : await response.json() };
      };

      const startServerProcess = async (port: number) => {
        child = spawn(process.execPath, ['dist/cli/main.js', 'server', '--port', String(port)], {
          env: { ...process.env, ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_SERVER_ADMIN_TOKEN: 'crash-admin', ORCHESTRATOR_DATABASE_URL: databaseUrl ?? '', ORCHESTRATOR_LOG_LEVEL: process.env.ORCHESTRATOR_LOG_LEVEL ?? 'error' },
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        await new Promise<void>((resolve, reject) => {
          let out = '';
          child!.stdout!.on('data', (d) => { out += d; if (out.includes('Server URL')) resolve(); });
          child!.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
        });
      };

      it('finishes the run after the server is killed with SIGKILL and restarted, and leaves no instance behind', async () => {
        await startServerProcess(port);
        await api('POST', '/api/projects/main/fleets/apply', gpucloudFleet({ idle_duration: '1s' }));
        await api('POST', '/api/projects/main/runs/apply', task('survivor', ['echo one', 'sleep 3', 'echo two']));
        await eventually(async () => (await api('GET', '/api/projects/main/runs/survivor')).body.status === 'running', 30_000, 'running');
        child!.kill('SIGKILL');
        await new Promise((r) => child!.once('exit', r));
        await startServerProcess(port);
        const run = await eventually(async () => {
          const { body } = await api('GET', '/api/projects/main/runs/survivor');
          return ['done', 'failed', 'terminated'].includes(body.status) ? body : null;
        }, 30_000, 'run finished after restart');
        expect(run.status).to.equal('done');
        expect((await api('GET', '/api/projects/main/runs/survivor/logs')).body.lines.map((l: { text: string }) => l.text)).to.deep.equal(['one', 'two']);
        await api('DELETE', '/api/projects/main/fleets/cloud');
        const cloud = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey });
        await eventually(async () => (await cloud.list()).every((i) => i.status === 'terminated'), 20_000, 'every cloud instance terminated');
        // The next test applies the fleet again on the same database.
        await eventually(async () => (await api('GET', '/api/projects/main/fleets/cloud')).status === 404, 20_000, 'the fleet gone');
      });

      it('takes back at once the leases of the server it restarts after: a run the killed server was reconciling is stopped without waiting out its lease', async () => {
        await startServerProcess(port);
        expect((await api('POST', '/api/projects/main/fleets/apply', gpucloudFleet({ idle_duration: '1s' }))).status).to.equal(201);
        await api('POST', '/api/projects/main/runs/apply', task('held', ['echo one', 'sleep 300']));
        await eventually(async () => (await api('GET', '/api/projects/main/runs/held')).body.status === 'running', 30_000, 'running');
        child!.kill('SIGKILL');
        await new Promise((r) => child!.once('exit', r));
        // The kill landed while a reconcile of the run held its lease, which would last ten minutes more.
        const record = JSON.parse(readFileSync(join(dir, CONTROLLER_OWNER_FILE), 'utf8')) as { owner: string; host: string };
        const db = await openDatabase({ url: databaseUrl, dataDir: join(dir, 'data') });
        await db.query(`UPDATE runs SET lease_owner = $1, lease_expires_at = now() + interval '10 minutes' WHERE name = 'held'`, [record.owner]);
        await db.close();
        // The embedded database's directory is opened by one process at a time: a record naming another host (a
        // container made anew) holds nothing there either.
        if (kind === 'pglite') writeFileSync(join(dir, CONTROLLER_OWNER_FILE), JSON.stringify({ ...record, host: 'another-host' }));
        await startServerProcess(port);
        expect((await api('POST', '/api/projects/main/runs/held/stop', {})).status).to.equal(202);
        const run = await eventually(async () => {
          const { body } = await api('GET', '/api/projects/main/runs/held');
          return ['done', 'failed', 'terminated'].includes(body.status) ? body : null;
        }, 30_000, 'run stopped after restart');
        expect(run).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
        await api('DELETE', '/api/projects/main/fleets/cloud');
        const cloud = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey });
        await eventually(async () => (await cloud.list()).every((i) => i.status === 'terminated'), 20_000, 'every cloud instance terminated');
      });
    });
  });
}
