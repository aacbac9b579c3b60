import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { GpucloudBackend } from '../backends/gpucloud/client.js';
import { isProcessAlive, waitForExit } from '../backends/processes.js';
import { waitForStatus } from './helpers/backend-waits.js';

const CLI = fileURLToPath(new URL('../cli/main.ts', import.meta.url));

function runCli(args: string[]): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', CLI, 'gpucloud-emulator', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Resolves with everything the process printed once `done` accepts it. */
function readUntil(stream: NodeJS.ReadableStream, done: (text: string) => boolean, timeoutMs = 20_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const timer = setTimeout(() => reject(new Error(`timed out waiting for output; got: ${text}`)), timeoutMs);
    stream.on('data', (chunk: Buffer) => {
      text += chunk.toString();
      if (done(text)) {
        clearTimeout(timer);
        resolve(text);
      }
    });
  });
}

describe('orchestrator gpucloud-emulator', function () {
  this.timeout(60_000);
  let child: ChildProcess | null = null;

  afterEach(() => {
    if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    child = null;
  });

  it('prints its URL and a config entry that works, applies --capacity and --sold-out, and stops its agents on SIGTERM', async () => {
    child = runCli(['--port', '0', '--boot-delay', '100ms', '--capacity', '1', '--sold-out', 'H200,RTXPRO6000']);
    const output = await readUntil(child.stdout!, (text) => /api_key: .+\n/.test(text));
    const url = /listening on (http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(output)?.[1];
    expect(url, output).to.be.a('string');
    const config = parse(output.slice(output.indexOf('projects:')));
    expect(config.projects[0].backends[0]).to.deep.equal({ type: 'local' });
    const entry = config.projects[0].backends[1];
    expect(entry).to.deep.include({ type: 'gpucloud', api_url: url });
    expect(entry.creds.type).to.equal('api_key');
    expect(output).to.contain(`API key: ${entry.creds.api_key}`);

    const cloud = new GpucloudBackend({ apiUrl: entry.api_url, apiKey: entry.creds.api_key });
    const offers = await cloud.offers();
    const availability = (model: string) => new Set(offers.filter((offer) => offer.gpu.name === model).map((offer) => offer.availability));
    expect(availability('H200')).to.deep.equal(new Set(['unavailable']));
    expect(availability('RTXPRO6000')).to.deep.equal(new Set(['unavailable']));
    expect(availability('H100')).to.deep.equal(new Set(['available']));

    const l4 = offers.filter((offer) => offer.gpu.name === 'L4');
    const { id } = await cloud.create({ offer: l4[0]!, idempotencyKey: 'cli-1', name: 'cli-1', agentToken: randomBytes(24).toString('hex') });
    await cloud.create({ offer: l4[1]!, idempotencyKey: 'cli-2', name: 'cli-2', agentToken: randomBytes(24).toString('hex') }).then(
      () => expect.fail('a second L4 instance was created with --capacity 1'),
      (error: Error) => expect(error.name).to.equal('NoCapacityError'),
    );
    await waitForStatus(cloud, id, 'running');
    const state = await fetch(`${url}/_emulator/state`, { headers: { authorization: `Bearer ${entry.creds.api_key}` } });
    const pid = ((await state.json()) as { instances: { agent_pid: number }[] }).instances[0]!.agent_pid;
    expect(isProcessAlive(pid)).to.equal(true);

    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    const [code] = await exited;
    expect(code).to.equal(0);
    await waitForExit(pid);
  });

  it('refuses an unknown GPU model and an unreadable duration with a clear message and exit code 1', async () => {
    for (const [args, message] of [
      [['--sold-out', 'A100'], /--sold-out: unknown GPU model A100/],
      [['--boot-delay', 'soon'], /invalid duration "soon"/],
    ] as const) {
      child = runCli(['--port', '0', ...args]);
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
      const [code] = await once(child, 'exit');
      expect(code, stderr).to.equal(1);
      expect(stderr).to.match(message);
    }
  });
});
