import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer, request as httpRequest } from 'node:http';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Instance, Run } from '../api/objects.js';
import { AgentClient } from '../agent/client.js';
import { GpucloudBackend } from '../backends/gpucloud/client.js';
import { isProcessAlive } from '../backends/processes.js';
import { randomToken, submission, waitForState } from './helpers/agent-jobs.js';
import { waitForStatus } from './helpers/backend-waits.js';
import { addProject, CLI_MAIN, makeHome, runCli, show } from './helpers/cli.js';
import { ONE_DATABASE } from './helpers/databases.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

const REPO = resolve(import.meta.dirname, '..');
const ONE_NODE_FLEET = `type: fleet
name: one
backends: [gpucloud]
nodes: 0..1
resources:
  gpu: 24GB..
`;

interface EmulatorProcess {
  child: ChildProcess;
  url: string;
  port: number;
  output(): string;
  /** SIGTERM (or the signal given); resolves with the exit code. */
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** `orchestrator gpucloud-emulator`, resolved once it prints its config entry. */
async function startEmulatorCli(args: string[], env: NodeJS.ProcessEnv = process.env): Promise<EmulatorProcess> {
  const child = spawn(process.execPath, [CLI_MAIN, 'gpucloud-emulator', '--boot-delay', '100ms', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => { output += chunk.toString(); });
  child.stderr!.on('data', (chunk: Buffer) => { output += chunk.toString(); });
  await eventually(async () => /api_key: .+\n/.test(output) || child.exitCode !== null, 20_000, 'the emulator to start');
  const url = /listening on (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(output)?.[1];
  if (!url) throw new Error(`the emulator did not start: ${output}`);
  return {
    child,
    url,
    port: Number(new URL(url).port),
    output: () => output,
    stop: async (signal = 'SIGTERM') => {
      if (child.exitCode !== null) return child.exitCode;
      const exited = once(child, 'exit');
      child.kill(signal);
      const [code] = await exited;
      return code as number | null;
    },
  };
}

function printedKey(output: string): string {
  const key = /^API key: (\S+)$/m.exec(output)?.[1];
  if (!key) throw new Error(`no API key printed: ${output}`);
  return key;
}

interface RecordingProxy {
  /** The proxy's gpucloud API URL, to give the server in place of the emulator's. */
  url: string;
  /** Each request the server made through it, with the emulator's answer. */
  requests: { method: string; path: string; status: number }[];
  close(): Promise<void>;
}

/** An HTTP proxy to the emulator on `port` (which keeps working across the emulator's restarts on that port), recording what the server asks. */
async function recordingProxy(port: number): Promise<RecordingProxy> {
  const requests: RecordingProxy['requests'] = [];
  const proxy = createServer((request, response) => {
    const forwarded = httpRequest({ host: '127.0.0.1', port, method: request.method, path: request.url, headers: request.headers }, (answer) => {
      requests.push({ method: request.method!, path: request.url!, status: answer.statusCode! });
      response.writeHead(answer.statusCode!, answer.headers);
      answer.pipe(response);
    });
    forwarded.on('error', () => response.destroy());
    request.pipe(forwarded);
  });
  proxy.listen(0, '127.0.0.1');
  await once(proxy, 'listening');
  return {
    url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}/v1`,
    requests,
    close: () => {
      proxy.closeAllConnections();
      return new Promise((resolve) => proxy.close(() => resolve()));
    },
  };
}

async function emulatorState(url: string, key: string): Promise<{ instances: { id: string; status: string; agent_pid: number | null }[] }> {
  const response = await fetch(`${url}/_emulator/state`, { headers: { authorization: `Bearer ${key}` } });
  return response.json() as Promise<{ instances: { id: string; status: string; agent_pid: number | null }[] }>;
}

for (const kind of ONE_DATABASE) {
  describe(`a fleet across restarts of the gpucloud emulator (${kind})`, function () {
    this.timeout(120_000);
    let emulator: EmulatorProcess | null = null;
    let server: TestServer | null = null;
    let proxy: RecordingProxy | null = null;
    let home: ReturnType<typeof makeHome>;
    let dir: string;
    const cli = (args: string[]) => runCli(args, { home: home.home, cwd: REPO, env: { COLUMNS: '250' } });
    const run = async (name: string) => (JSON.parse((await cli(['ps', '-a', '--json'])).stdout) as Run[]).find((r) => r.name === name);
    const instances = async (all = false) => (await server!.api('GET', `/api/projects/main/instances${all ? '?all=true' : ''}`)).body as Instance[];
    const startServer = async (key: string, apiUrl = emulator!.url) => {
      server = await startTestServer(kind, gpucloudConfig(apiUrl, key));
      await addProject(home.home, server.url);
    };
    const runSleeper = async () => {
      const submitted = await cli(['apply', '-f', 'test/fixtures/sleeper.yml', '-y', '-d']);
      expect(submitted.code, show(submitted)).to.equal(0);
      await eventually(async () => (await run('sleeper'))?.status === 'running', 30_000, 'sleeper running');
    };

    beforeEach(() => {
      home = makeHome();
      dir = mkdtempSync(join(tmpdir(), 'orch-emulator-restart-'));
      writeFileSync(join(dir, 'one.yml'), ONE_NODE_FLEET);
    });

    afterEach(async function () {
      this.timeout(60_000);
      await server?.stop();
      server = null;
      await proxy?.close();
      proxy = null;
      await emulator?.stop();
      emulator = null;
      home.remove();
      rmSync(dir, { recursive: true, force: true });
    });

    it('keeps its key and instances with the same --state-dir: a running task carries on and its instance takes the next task', async () => {
      const stateDir = join(dir, 'state');
      emulator = await startEmulatorCli(['--port', '0', '--state-dir', stateDir]);
      const key = printedKey(emulator.output());
      await startServer(key);
      expect((await cli(['apply', '-f', 'examples/fleets/gpucloud.yml', '-y'])).code).to.equal(0);
      await runSleeper();
      const [before] = await instances();
      const { instances: [cloudInstance] } = await emulatorState(emulator.url, key);
      expect(await emulator.stop()).to.equal(0);
      expect(emulator.output()).to.contain('SIGTERM: stopping; the instances run on');
      expect(isProcessAlive(cloudInstance!.agent_pid!)).to.equal(true);

      emulator = await startEmulatorCli(['--port', String(emulator.port), '--state-dir', stateDir]);
      expect(printedKey(emulator.output())).to.equal(key);
      const { instances: [restored] } = await emulatorState(emulator.url, key);
      expect(restored).to.include({ id: cloudInstance!.id, status: 'running', agent_pid: cloudInstance!.agent_pid });
      // Longer than the server's grace for an unreachable agent.
      await new Promise((r) => setTimeout(r, 4000));
      expect((await run('sleeper'))!.status).to.equal('running');
      expect((await instances())[0]).to.include({ name: before!.name, status: 'busy' });

      expect((await cli(['stop', 'sleeper'])).code).to.equal(0);
      const stopped = await eventually(async () => {
        const sleeper = await run('sleeper');
        return sleeper?.status === 'terminated' ? sleeper : null;
      }, 30_000, 'sleeper stopped');
      expect(stopped.terminationReason).to.equal('stopped_by_user');
      const hello = await cli(['apply', '-f', 'examples/tasks/hello.yml', '-y']);
      expect(hello.code, show(hello)).to.equal(0);
      expect(hello.stdout).to.contain('Hello from ');
      expect((await run('hello'))!.instance).to.equal(before!.name);
      expect((await instances(true)).map((i) => i.name)).to.deep.equal([before!.name]);

      expect((await cli(['fleet', 'delete', 'gpucloud', '-y'])).code).to.equal(0);
      await eventually(async () => (await instances()).length === 0, 30_000, 'the instance to terminate');
      await eventually(async () => (await emulatorState(emulator!.url, key)).instances[0]?.status === 'terminated', 20_000, 'the emulator to end it');
      await eventually(async () => !isProcessAlive(cloudInstance!.agent_pid!) || null, 10_000, 'the adopted agent to exit');
    });

    it('after a restart without its state, marks the forgotten instance terminated and runs the next task on a new one', async () => {
      const key = `gc_${randomBytes(12).toString('hex')}`;
      emulator = await startEmulatorCli(['--port', '0', '--api-key', key]);
      await startServer(key);
      expect((await cli(['apply', '-f', join(dir, 'one.yml'), '-y'])).code).to.equal(0);
      await runSleeper();
      const [lost] = await instances();
      expect(await emulator.stop()).to.equal(0);
      emulator = await startEmulatorCli(['--port', String(emulator.port), '--api-key', key]);

      const ended = await eventually(async () => (await instances(true)).find((i) => i.name === lost!.name && i.status === 'terminated'), 30_000, 'the lost instance terminated');
      expect(ended.terminationReason).to.be.oneOf(['terminated_by_backend', 'unreachable']);
      await eventually(async () => ['failed', 'terminated'].includes((await run('sleeper'))!.status), 10_000, 'the lost instance\'s run to end');
      const hello = await cli(['apply', '-f', 'examples/tasks/hello.yml', '-y']);
      expect(hello.code, show(hello)).to.equal(0);
      expect(hello.stdout).to.contain('Hello from ');
      expect((await run('hello'))!.instance).not.to.equal(lost!.name);
      expect((await cli(['fleet', 'delete', 'one', '-y'])).code).to.equal(0);
      await eventually(async () => (await instances()).length === 0, 30_000, 'the new instance to terminate');
    });

    it('shows an instance it cannot terminate because the key is refused in fleet and in one event, and names it in the queue reason', async () => {
      emulator = await startEmulatorCli(['--port', '0', '--api-key', 'gc_the-first-key']);
      proxy = await recordingProxy(emulator.port);
      await startServer('gc_the-first-key', proxy.url);
      expect((await cli(['apply', '-f', join(dir, 'one.yml'), '-y'])).code).to.equal(0);
      await runSleeper();
      const [instance] = await instances();
      expect(await emulator.stop()).to.equal(0);
      emulator = await startEmulatorCli(['--port', String(emulator.port), '--api-key', 'gc_another-key']);

      const refusal = 'cannot terminate: invalid gpucloud API key; fix the key in config.yml';
      const table = await eventually(async () => {
        const listed = await cli(['fleet']);
        return listed.stdout.includes(refusal) ? listed.stdout : null;
      }, 30_000, 'fleet to show the refusal');
      expect(table).to.match(new RegExp(`^one\\s+${instance!.name}\\s+gpucloud\\s+L4:24GB:1\\s+terminating: ${refusal}`, 'm'));

      const submitted = await cli(['apply', '-f', 'examples/tasks/hello.yml', '-y', '-d']);
      expect(submitted.code, show(submitted)).to.equal(0);
      await eventually(async () => (await run('hello'))?.statusMessage === 'waiting: fleet one is at its maximum of 1 node: 1 terminating', 10_000, 'the queue reason');

      // The server keeps trying (the key may be fixed), so a second terminate is refused too; it is not told again.
      const refusedTerminates = () => proxy!.requests.filter((r) => r.method === 'DELETE' && r.path.startsWith('/v1/instances/') && r.status === 401).length;
      await eventually(async () => refusedTerminates() >= 2, 20_000, 'a second terminate attempt, refused');
      // An event for it would be written straight after the answer.
      await new Promise((r) => setTimeout(r, 1000));
      const events = await cli(['events', '--object', instance!.name]);
      expect(events.code, show(events)).to.equal(0);
      const refusals = events.stdout.split('\n').filter((line) => line.includes(refusal));
      expect(refusals, events.stdout).to.have.length(1);
      expect(refusals[0]).to.match(/\sBackendRefused\s/);
      expect((await instances())[0]).to.include({ status: 'terminating', statusMessage: refusal });
      expect((await cli(['stop', 'hello'])).code).to.equal(0);
    });
  });
}

describe('orchestrator gpucloud-emulator on exit', function () {
  this.timeout(60_000);
  let dir: string;
  let env: NodeJS.ProcessEnv;
  let running: EmulatorProcess[] = [];

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'orch-emulator-tmp-'));
    env = { ...process.env, TMPDIR: dir };
    running = [];
  });

  afterEach(async () => {
    for (const emulator of running) await emulator.stop('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });

  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    it(`removes its temporary folders, the agents' work folders included, on ${signal}`, async () => {
      const emulator = await startEmulatorCli(['--port', '0'], env);
      running.push(emulator);
      const cloud = new GpucloudBackend({ apiUrl: emulator.url, apiKey: printedKey(emulator.output()) });
      const [offer] = await cloud.offers();
      const agentToken = randomToken();
      const { id } = await cloud.create({ offer: offer!, idempotencyKey: 'tmp-1', name: 'tmp-1', agentToken });
      const { agentUrl } = await waitForStatus(cloud, id, 'running');
      const agent = new AgentClient(agentUrl!, agentToken);
      const job = submission({ commands: ['echo working > notes.txt', 'sleep 60'] });
      await agent.submit(job);
      await waitForState(agent, job.jobId, ['running']);
      expect(readdirSync(dir)).to.have.length(1);
      expect(await emulator.stop(signal)).to.equal(0);
      expect(readdirSync(dir)).to.deep.equal([]);
    });
  }

  it('keeps a --state-dir it was given', async () => {
    const stateDir = join(dir, 'kept');
    const emulator = await startEmulatorCli(['--port', '0', '--state-dir', stateDir], env);
    running.push(emulator);
    expect(await emulator.stop()).to.equal(0);
    expect(readdirSync(dir)).to.deep.equal(['kept']);
    expect(existsSync(join(stateDir, 'api-key'))).to.equal(true);
  });

  it('says plainly that its port is taken, with exit code 1 and nothing left behind', async () => {
    const first = await startEmulatorCli(['--port', '0'], env);
    running.push(first);
    const before = readdirSync(dir);
    const second = spawn(process.execPath, [CLI_MAIN, 'gpucloud-emulator', '--port', String(first.port)], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    second.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    const [code] = await once(second, 'exit');
    expect(code, stderr).to.equal(1);
    expect(stderr).to.equal(`error: port ${first.port} is already in use; is another emulator running? --port picks another\n`);
    expect(readdirSync(dir)).to.deep.equal(before);
  });
});
