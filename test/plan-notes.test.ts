import { expect } from 'chai';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Fleet, Run, RunPlan } from '../api/objects.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { addProject, endCliSuite, makeHome, runCli, show, type CliResult } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, gpucloudConfig, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

/** The `ignored` lines of a plan, as `field: message`. */
function ignoredLines(stderr: string): string[] {
  const start = stderr.search(/^ {2}ignored /m);
  if (start < 0) return [];
  const lines = stderr.slice(start).split('\n');
  const rest = lines.slice(1).findIndex((line) => !line.startsWith(' '.repeat(15)));
  return lines.slice(0, rest < 0 ? undefined : rest + 1).map((line) => line.slice(15));
}

/** A plan's line for the instance it would take. */
function instanceLine(stderr: string): string | undefined {
  return /^ {2}instance {5}(.*)$/m.exec(stderr)?.[1];
}

interface Suite {
  server: TestServer;
  home: ReturnType<typeof makeHome>;
  work: string;
}

function cliOf(suite: () => Suite) {
  const cli = (args: string[]) => runCli(args, { home: suite().home.home, cwd: suite().work });
  return {
    cli,
    /** Writes the YAML to a file and applies it with -y -d. */
    apply: async (name: string, yaml: string): Promise<CliResult> => {
      const file = join(suite().work, `${name}.yml`);
      writeFileSync(file, yaml);
      const result = await cli(['apply', '-f', file, '-y', '-d']);
      expect(result.code, show(result)).to.equal(0);
      return result;
    },
    plan: async (spec: Record<string, unknown>): Promise<RunPlan> => {
      const response = await suite().server.api('POST', '/api/projects/main/runs/plan', { spec });
      expect(response.status, JSON.stringify(response.body)).to.equal(200);
      return response.body as RunPlan;
    },
    run: async (name: string) => (await suite().server.api('GET', `/api/projects/main/runs/${name}`)).body as Run,
  };
}

async function startSuite(config: string, kind: (typeof DATABASE_KINDS)[number]): Promise<Suite> {
  const server = await startTestServer(kind, config);
  const home = makeHome();
  await addProject(home.home, server.url);
  return { server, home, work: mkdtempSync(join(tmpdir(), 'orch-plan-')) };
}

for (const kind of DATABASE_KINDS) {
  describe(`plans say what will not happen (local backend, runtime process, ${kind})`, function () {
    this.timeout(90_000);
    let suite: Suite;
    const { apply, plan, run } = cliOf(() => suite);

    before(async function () {
      this.timeout(120_000);
      suite = await startSuite(LOCAL_CONFIG, kind);
      await apply('fleet', 'type: fleet\nname: local\nbackends: [local]\nnodes: 0..1\n');
    });

    after(async function () {
      this.timeout(60_000);
      await endCliSuite(suite?.server, suite?.home, suite?.work);
    });

    it('lists exactly the fields of a task that nothing acts on, in the plan and its JSON', async () => {
      const yaml = [
        'type: task', 'name: train', 'commands:', '  - "true"', 'retry: true', 'python: "3.12"', 'ports: [8080]',
        'utilization_policy:', '  min_gpu_utilization: 10', '  time_window: 30m', 'max_duration: 1h', 'priority: 5',
        'privileged: true', 'shell: bash', 'entrypoint: /usr/bin/env', 'backends: [local]', 'fleets: [local]',
        'resources:', '  shm_size: 1GB', '',
      ].join('\n');
      const applied = await apply('train', yaml);
      expect(ignoredLines(applied.stderr)).to.deep.equal([
        'python: not used: this instance runs jobs as processes on the machine itself, without the default image and its virtual environment of that Python; the commands get the machine\'s own Python',
        'privileged: not used: this instance runs jobs as processes on the machine itself, with the agent\'s own privileges; only a container can be made privileged',
        'resources.shm_size: not used: this instance runs jobs as processes on the machine itself, which share its /dev/shm',
      ]);
      const json = await plan({ type: 'service', commands: ['true'], port: 80, retry: { duration: '2h' }, max_duration: '1h', priority: 5 });
      expect(json.notActedOn).to.deep.equal([{ field: 'retry', message: 'not used by services: a service replaces a failed replica itself' }]);
    });

    it('says utilization_policy does nothing for a run that asks for no GPU', async () => {
      const policy = { min_gpu_utilization: 10, time_window: '30m' };
      const json = await plan({ type: 'task', commands: ['true'], resources: { gpu: 0 }, utilization_policy: policy });
      expect(json.notActedOn).to.deep.equal([{ field: 'utilization_policy', message: 'not acted on: it watches the run\'s GPUs, and this run asks for none (resources.gpu: 0)' }]);
      expect((await plan({ type: 'task', commands: ['true'], resources: { gpu: 'L4' }, utilization_policy: policy })).notActedOn).to.deep.equal([]);
    });

    it('says startup_order does nothing for a task of one node', async () => {
      const json = await plan({ type: 'task', commands: ['true'], startup_order: 'master-first' });
      expect(json.notActedOn).to.deep.equal([{ field: 'startup_order', message: 'not acted on: it orders the jobs of a multi-node task, and this task runs one job (nodes: 1)' }]);
      expect((await plan({ type: 'task', commands: ['true'], startup_order: 'any' })).notActedOn).to.deep.equal([]);
      expect((await plan({ type: 'task', commands: ['true'], nodes: 2, startup_order: 'master-first' })).notActedOn).to.deep.equal([]);
    });

    it('names image, and says the runtime, when the run would land on the process runtime', async () => {
      const json = await plan({ type: 'task', image: 'alpine:3.20', commands: ['true'] });
      expect(json.runtime).to.equal('process');
      expect(json.notActedOn).to.deep.equal([{ field: 'image', message: 'not used: this instance runs jobs as processes on the machine itself, without a container (a backend with runtime: docker runs images)' }]);
      const applied = await apply('imaged', 'type: task\nname: imaged\nimage: alpine:3.20\ncommands:\n  - "true"\n');
      expect(ignoredLines(applied.stderr)).to.deep.equal([json.notActedOn.map((n) => `${n.field}: ${n.message}`)[0]]);
      expect(applied.stderr).to.contain('\n  runtime      process: the commands run on the machine itself, without a container, so what they call (python, uv, CUDA) '
        + 'must be installed there; to run them in an image (yours, or the default one), use a backend with runtime: docker\n');
    });

    it('lists nothing for a spec without such fields', async () => {
      const json = await plan({ type: 'task', name: 'plain', commands: ['echo hi'], env: { A: 'b' }, resources: { cpu: '1..' } });
      expect(json.notActedOn).to.deep.equal([]);
      const asksForNothingMore = await plan({ type: 'task', commands: ['true'], retry: false, ports: [] });
      expect(asksForNothingMore.notActedOn).to.deep.equal([]);
      const oneReplica = await plan({ type: 'service', commands: ['true'], port: 80, replicas: 1, probes: [] });
      expect(oneReplica.notActedOn).to.deep.equal([]);
      const applied = await apply('plain', 'type: task\nname: plain\ncommands:\n  - echo hi\n');
      expect(applied.stderr).not.to.match(/ignored/);
    });

    it('lists those of a service and a dev environment', async () => {
      const service = await plan({
        type: 'service', commands: ['python -m http.server 8000'], port: 8000, replicas: 2, auth: true,
        probes: [{ type: 'http', url: '/health' }], image: 'python:3.12',
      });
      expect(service.notActedOn.map((n) => n.field)).to.deep.equal(['image']);
      const dev = await plan({ type: 'dev-environment', ide: 'vscode', inactivity_duration: '2h', python: '3.12' });
      expect(dev.notActedOn.map((n) => n.field)).to.deep.equal(['python']);
    });

    it('names the idle instance that the run then takes', async () => {
      const name = await eventually(async () => {
        const [instance] = ((await suite.server.api('GET', '/api/projects/main/fleets/local')).body as Fleet).instances;
        return instance?.status === 'idle' && instance.name;
      }, 30_000, 'the local instance idle');
      const applied = await apply('next', 'type: task\nname: next\ncommands:\n  - "true"\n');
      expect(instanceLine(applied.stderr)).to.equal(`${name} (idle, fleet local, no GPU, $0.00/h)`);
      expect(await eventually(async () => (await run('next')).instance, 20_000, 'next to be placed')).to.equal(name);
    });

    it('lists the fleet fields nothing acts on in the fleet\'s plan', async () => {
      const applied = await apply('shm', 'type: fleet\nname: shm\nbackends: [local]\nnodes: 0..1\nresources:\n  shm_size: 8GB\n');
      expect(ignoredLines(applied.stderr)).to.deep.equal(['resources.shm_size: not used on a fleet: each run sets the shared memory of its own container with resources.shm_size']);
    });
  });

  describe(`the plan's instance is the one the run gets (gpucloud, ${kind})`, function () {
    this.timeout(90_000);
    let emulator: RunningEmulator;
    let suite: Suite;
    const { apply, plan, run } = cliOf(() => suite);
    const idleInstances = async () => ((await suite.server.api('GET', '/api/projects/main/fleets/gpucloud')).body as Fleet).instances.filter((i) => i.status === 'idle');

    before(async function () {
      this.timeout(120_000);
      emulator = await startEmulator({ port: 0, bootDelayMs: 200, capacity: { H100: 0 } });
      suite = await startSuite(gpucloudConfig(emulator.url, emulator.apiKey), kind);
      await apply('fleet', 'type: fleet\nname: gpucloud\nbackends: [gpucloud]\nnodes: 2\nresources:\n  gpu: 24GB..\n');
      await eventually(async () => (await idleInstances()).length === 2, 60_000, 'two idle instances');
    });

    after(async function () {
      this.timeout(60_000);
      await endCliSuite(suite?.server, suite?.home, suite?.work);
      await emulator?.close();
    });

    it('names the instance each run then takes, and image because its agent runs processes', async () => {
      for (const name of ['first', 'second']) {
        await eventually(async () => (await idleInstances()).length === 2, 30_000, 'both instances idle');
        const applied = await apply(name, `type: task\nname: ${name}\nimage: alpine:3.20\ncommands:\n  - "true"\n`);
        const line = instanceLine(applied.stderr);
        expect(line, applied.stderr).to.match(/^gpucloud-\d+ \(idle, fleet gpucloud, GPU L4:24GB:1, \$0\.80\/h\)$/);
        expect(ignoredLines(applied.stderr).map((l) => l.split(':')[0])).to.deep.equal(['image']);
        const placed = await eventually(async () => (await run(name)).instance, 20_000, `${name} to be placed`);
        expect(placed).to.equal(line!.split(' ')[0]);
      }
    });

    it('says "an idle instance of fleet" while a run queued before it may take one first', async () => {
      await apply('big', 'type: task\nname: big\nresources:\n  gpu: H100\ncommands:\n  - "true"\n');
      await eventually(async () => /^waiting: /.test((await run('big')).statusMessage), 20_000, 'big waiting');
      const json = await plan({ type: 'task', commands: ['true'] });
      expect(json.queuedBefore).to.equal(1);
      expect(json.instance).to.include({ state: 'idle', name: null, fleet: 'gpucloud' });
      const applied = await apply('after-big', 'type: task\nname: after-big\ncommands:\n  - "true"\n');
      expect(instanceLine(applied.stderr)).to.equal('an idle instance of fleet gpucloud (GPU L4:24GB:1, $0.80/h); 1 run queued before this one may take it first');
      const higher = await plan({ type: 'task', commands: ['true'], priority: 10 });
      expect(higher.queuedBefore).to.equal(0);
      await suite.server.api('POST', '/api/projects/main/runs/big/stop', { abort: true });
    });
  });
}
