import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Offer } from '../api/offer.js';
import { BackendError, NoCapacityError } from '../backends/backend.js';
import { LocalBackend } from '../backends/local/local.js';
import { gpuModelName, parseNvidiaSmiGpus } from '../backends/local/machine.js';
import { isProcessAlive, signalProcessGroup, waitForExit } from '../backends/processes.js';
import { createBackend } from '../backends/registry.js';
import { GpucloudBackend } from '../backends/gpucloud/client.js';
import { agentHealth } from './helpers/backend-waits.js';

const token = () => randomBytes(24).toString('hex');

describe('local backend', function () {
  this.timeout(60_000);
  let stateDir: string;
  let backend: LocalBackend;
  let offer: Offer;
  const recordedPid = (): number => {
    const file = join(stateDir, 'local-instance.json');
    return (JSON.parse(readFileSync(file, 'utf8')) as { pid: number }).pid;
  };
  /** Agent processes whose command line names this test's state folder. */
  const agentProcesses = (): string[] => readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).filter((pid) => {
    try {
      const commandLine = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      return commandLine.includes('agent') && commandLine.some((arg) => arg.startsWith(stateDir));
    } catch {
      return false;
    }
  });

  beforeEach(async () => {
    stateDir = mkdtempSync(join(tmpdir(), 'local-backend-'));
    backend = new LocalBackend({ stateDir, runtime: 'process' });
    [offer] = await backend.offers() as [Offer];
  });
  afterEach(async () => {
    for (const instance of await backend.list()) await backend.terminate(instance.id);
    rmSync(stateDir, { recursive: true, force: true });
  });

  it('offers this machine as one free instance', () => {
    expect(offer).to.include({ backend: 'local', offerId: 'local', region: 'local', pricePerHour: 0, availability: 'available' });
    expect(offer.cpus).to.equal(cpus().length);
    expect(offer.memoryMib).to.equal(Math.floor(totalmem() / 1024 / 1024));
    expect(offer.diskMib).to.be.greaterThan(0);
    const hasNvidiaSmi = spawnSync('nvidia-smi', ['-L']).status === 0;
    if (!hasNvidiaSmi) expect(offer.gpu).to.deep.equal({ name: '', memoryMib: 0, count: 0 });
  });

  it('creates a running agent, returns it again for the same key, refuses a second one, and terminates it', async () => {
    const agentToken = token();
    const created = await backend.create({ offer, idempotencyKey: 'key-1', name: 'local-1', agentToken });
    expect(created).to.include({ status: 'running', idempotencyKey: 'key-1', region: 'local' });
    const health = await agentHealth(created.agentUrl!, agentToken);
    expect(health.status).to.equal(200);
    expect(health.body).to.include({ ok: true, instanceId: created.id });
    expect((await backend.offers())[0]!.availability).to.equal('unavailable');

    expect((await backend.create({ offer, idempotencyKey: 'key-1', name: 'local-1', agentToken })).id).to.equal(created.id);
    const second = await backend.create({ offer, idempotencyKey: 'key-2', name: 'local-2', agentToken: token() }).catch((error: Error) => error);
    expect(second).to.be.instanceOf(NoCapacityError);
    expect(await backend.get(created.id)).to.deep.equal(created);
    expect(await backend.list()).to.deep.equal([created]);

    const pid = recordedPid();
    await backend.terminate(created.id);
    expect(isProcessAlive(pid)).to.equal(false);
    expect(await backend.get(created.id)).to.include({ status: 'terminated', agentUrl: null });
    expect(await backend.list()).to.deep.equal([]);
    await backend.terminate(created.id);
    expect((await backend.offers())[0]!.availability).to.equal('available');
  });

  it('keeps the instance when the server that created it exits, for a new backend on the same state folder', async () => {
    const agentToken = token();
    const script = join(stateDir, 'create.mts');
    const localModule = fileURLToPath(new URL('../backends/local/local.ts', import.meta.url));
    writeFileSync(script, [
      `import { LocalBackend } from ${JSON.stringify(localModule)};`,
      `const backend = new LocalBackend({ stateDir: ${JSON.stringify(stateDir)}, runtime: 'process' });`,
      'const [offer] = await backend.offers();',
      `const instance = await backend.create({ offer, idempotencyKey: 'restart', name: 'restart', agentToken: ${JSON.stringify(agentToken)} });`,
      'console.log(JSON.stringify(instance));',
    ].join('\n'));
    const server = spawnSync(process.execPath, ['--import', 'tsx', script], { encoding: 'utf8', timeout: 30_000 });
    expect(server.status, server.stderr).to.equal(0);
    const created = JSON.parse(server.stdout.trim().split('\n').at(-1)!) as { id: string; agentUrl: string };

    const restarted = new LocalBackend({ stateDir, runtime: 'process' });
    expect(await restarted.get(created.id)).to.include({ status: 'running', agentUrl: created.agentUrl });
    expect((await agentHealth(created.agentUrl, agentToken)).body).to.include({ ok: true, instanceId: created.id });
    const again = await restarted.create({ offer, idempotencyKey: 'restart', name: 'restart', agentToken });
    expect(again.id).to.equal(created.id);
    await restarted.terminate(created.id);
    expect(await restarted.list()).to.deep.equal([]);
  });

  it('reports a dead agent as terminated and lets a new instance take its place', async () => {
    const first = await backend.create({ offer, idempotencyKey: 'dies', name: 'dies', agentToken: token() });
    const pid = recordedPid();
    signalProcessGroup(pid, 'SIGKILL');
    await waitForExit(pid);
    expect(await backend.get(first.id)).to.include({ status: 'terminated', agentUrl: null });
    const second = await backend.create({ offer, idempotencyKey: 'after', name: 'after', agentToken: token() });
    expect(second.id).not.to.equal(first.id);
    expect(second.status).to.equal('running');
    expect(existsSync(join(stateDir, 'instances', first.id))).to.equal(false);
  });

  it('starts one agent when two servers create with the same key at once', async () => {
    const agentToken = token();
    const other = new LocalBackend({ stateDir, runtime: 'process' });
    const [a, b] = await Promise.all([
      backend.create({ offer, idempotencyKey: 'race', name: 'race', agentToken }),
      other.create({ offer, idempotencyKey: 'race', name: 'race', agentToken }),
    ]);
    expect(a.id).to.equal(b.id);
    expect(agentProcesses()).to.deep.equal([String(recordedPid())]);
  });

  it('refuses offers of another backend and a corrupt state file with clear errors', async () => {
    const cloudOffer: Offer = { ...offer, backend: 'gpucloud' };
    await backend.create({ offer: cloudOffer, idempotencyKey: 'k', name: 'n', agentToken: token() }).then(
      () => expect.fail('created from a gpucloud offer'),
      (error: Error) => expect(error.message).to.match(/belongs to backend gpucloud, not local/),
    );
    writeFileSync(join(stateDir, 'local-instance.json'), '{"id": 1}');
    const corrupt = await backend.list().catch((error: Error) => error);
    expect(corrupt).to.be.instanceOf(BackendError);
    expect((corrupt as Error).message).to.match(/local-instance\.json is not a local instance record/);
    rmSync(join(stateDir, 'local-instance.json'));
  });
});

describe('local machine description', () => {
  it('reads nvidia-smi output as model, smallest memory and count', () => {
    const csv = 'NVIDIA H100 80GB HBM3, 81559\nNVIDIA H100 80GB HBM3, 81559\n';
    expect(parseNvidiaSmiGpus(csv)).to.deep.equal({ name: 'H100', memoryMib: 81559, count: 2 });
    expect(parseNvidiaSmiGpus('')).to.deep.equal({ name: '', memoryMib: 0, count: 0 });
  });

  it('names GPUs the way offers do', () => {
    expect(gpuModelName('NVIDIA L4')).to.equal('L4');
    expect(gpuModelName('NVIDIA H200')).to.equal('H200');
    expect(gpuModelName('NVIDIA RTX PRO 6000 Blackwell Server Edition')).to.equal('RTXPRO6000');
    expect(gpuModelName('NVIDIA A100-SXM4-80GB')).to.equal('A100');
    expect(gpuModelName('NVIDIA GeForce RTX 4090')).to.equal('RTX4090');
  });
});

describe('backend registry', () => {
  it('builds the driver a config entry names', () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'registry-'));
    try {
      expect(createBackend({ type: 'gpucloud', api_url: 'http://127.0.0.1:8090/v1', creds: { type: 'api_key', api_key: 'k-123' } }, { stateDir }))
        .to.be.instanceOf(GpucloudBackend);
      expect(createBackend({ type: 'local' }, { stateDir })).to.be.instanceOf(LocalBackend);
    } finally {
      rmSync(stateDir, { recursive: true, force: true });
    }
  });

  it('names the wrong field of a malformed entry', () => {
    const build = (config: unknown) => () => createBackend(config as never, { stateDir: tmpdir() });
    expect(build({ type: 'gpucloud', creds: { type: 'api_key' } })).to.throw(BackendError, /invalid gpucloud backend config: \/creds\/api_key/);
    expect(build({ type: 'gpucloud', creds: { type: 'api_key', api_key: 'k' }, region: 'x' })).to.throw(BackendError, /invalid gpucloud backend config/);
    expect(build({ type: 'aws' })).to.throw(BackendError, /unknown backend type "aws": use gpucloud or local/);
    expect(build({ type: 'local', runtime: 'vm' })).to.throw(BackendError, /invalid local backend config: \/runtime/);
  });
});
