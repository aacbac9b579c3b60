import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
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
  let serverDir: string;
  let stateDir: string;
  let backend: LocalBackend;
  let offer: Offer;
  const recordFile = (id: string): string => join(stateDir, 'instances', `${id}.json`);
  const recordedPid = (id: string): number => (JSON.parse(readFileSync(recordFile(id), 'utf8')) as { pid: number }).pid;
  const create = (key: string, agentToken = token()) => backend.create({ offer, idempotencyKey: key, name: key, agentToken });
  const availability = async (): Promise<string> => (await backend.offers())[0]!.availability;
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
    serverDir = mkdtempSync(join(tmpdir(), 'local-backend-'));
    stateDir = join(serverDir, 'local');
    backend = createBackend({ type: 'local', runtime: 'process', instances: 2 }, { stateDir: serverDir }) as LocalBackend;
    [offer] = await backend.offers() as [Offer];
  });
  afterEach(async () => {
    for (const instance of await backend.list()) await backend.terminate(instance.id);
    rmSync(serverDir, { recursive: true, force: true });
  });

  it('offers the whole machine, free while fewer than its instances run', () => {
    expect(offer).to.include({ backend: 'local', offerId: 'local', region: 'local', pricePerHour: 0, availability: 'available' });
    expect(offer.cpus).to.equal(cpus().length);
    expect(offer.memoryMib).to.equal(Math.floor(totalmem() / 1024 / 1024));
    expect(offer.diskMib).to.be.greaterThan(0);
    const hasNvidiaSmi = spawnSync('nvidia-smi', ['-L']).status === 0;
    if (!hasNvidiaSmi) expect(offer.gpu).to.deep.equal({ name: '', memoryMib: 0, count: 0 });
  });

  it('runs as many agents as its instances setting allows, each with its own token and folder, and refuses one more', async () => {
    const [firstToken, secondToken] = [token(), token()];
    const first = await create('key-1', firstToken);
    expect(await availability()).to.equal('available');
    const second = await create('key-2', secondToken);
    expect(first).to.include({ status: 'running', idempotencyKey: 'key-1', region: 'local' });
    expect(second).to.include({ status: 'running', idempotencyKey: 'key-2', region: 'local' });
    expect(second.id).not.to.equal(first.id);
    expect(second.agentUrl).not.to.equal(first.agentUrl);
    expect((await agentHealth(first.agentUrl!, firstToken)).body).to.include({ ok: true, instanceId: first.id });
    expect((await agentHealth(second.agentUrl!, secondToken)).body).to.include({ ok: true, instanceId: second.id });
    expect((await agentHealth(second.agentUrl!, firstToken)).status).to.equal(401);
    expect(existsSync(join(stateDir, 'instances', first.id))).to.equal(true);
    expect(existsSync(join(stateDir, 'instances', second.id))).to.equal(true);
    expect(await availability()).to.equal('unavailable');

    expect((await create('key-1', firstToken)).id).to.equal(first.id);
    const third = await create('key-3').catch((error: Error) => error);
    expect(third).to.be.instanceOf(NoCapacityError);
    expect((third as Error).message).to.equal(`no room for another local instance: ${first.id}, ${second.id} already run, `
      + 'the most that the local backend\'s setting instances: 2 allows; raise it in the server\'s config.yml to run more at once');
    expect(await backend.get(first.id)).to.deep.equal(first);
    expect(await backend.list()).to.have.deep.members([first, second]);

    const pid = recordedPid(first.id);
    await backend.terminate(first.id);
    expect(isProcessAlive(pid)).to.equal(false);
    expect(await backend.get(first.id)).to.include({ status: 'terminated', agentUrl: null });
    expect(await backend.list()).to.deep.equal([second]);
    await backend.terminate(first.id);
    expect(await availability()).to.equal('available');
    const replacement = await create('key-3');
    expect(replacement.status).to.equal('running');
    expect((await backend.list()).map((instance) => instance.id)).to.have.members([second.id, replacement.id]);
  });

  it('keeps the instances when the server that created them exits, for a new backend on the same state folder', async () => {
    const agentToken = token();
    const script = join(serverDir, 'create.mts');
    const localModule = fileURLToPath(new URL('../backends/local/local.ts', import.meta.url));
    writeFileSync(script, [
      `import { LocalBackend } from ${JSON.stringify(localModule)};`,
      `const backend = new LocalBackend({ stateDir: ${JSON.stringify(stateDir)}, runtime: 'process' });`,
      'const [offer] = await backend.offers();',
      `const created = await Promise.all(['restart-1', 'restart-2'].map((key) => backend.create({ offer, idempotencyKey: key, name: key, agentToken: ${JSON.stringify(agentToken)} })));`,
      'console.log(JSON.stringify(created));',
    ].join('\n'));
    const server = spawnSync(process.execPath, ['--import', 'tsx', script], { encoding: 'utf8', timeout: 30_000 });
    expect(server.status, server.stderr).to.equal(0);
    const created = JSON.parse(server.stdout.trim().split('\n').at(-1)!) as { id: string; agentUrl: string; idempotencyKey: string }[];
    expect(created).to.have.length(2);

    const restarted = new LocalBackend({ stateDir, runtime: 'process' });
    expect((await restarted.list()).map((instance) => instance.id)).to.have.members(created.map((instance) => instance.id));
    for (const instance of created) {
      expect(await restarted.get(instance.id)).to.include({ status: 'running', agentUrl: instance.agentUrl });
      expect((await agentHealth(instance.agentUrl, agentToken)).body).to.include({ ok: true, instanceId: instance.id });
      const again = await restarted.create({ offer, idempotencyKey: instance.idempotencyKey, name: 'restart', agentToken });
      expect(again.id).to.equal(instance.id);
    }
    for (const instance of created) await restarted.terminate(instance.id);
    expect(await restarted.list()).to.deep.equal([]);
  });

  it('finds the agent an earlier version recorded in its single-record state file, and counts it', async () => {
    const agentToken = token();
    const earlier = await create('before-upgrade', agentToken);
    const pid = recordedPid(earlier.id);
    const singleRecordFile = join(stateDir, 'local-instance.json');
    renameSync(recordFile(earlier.id), singleRecordFile);

    const upgraded = new LocalBackend({ stateDir, runtime: 'process', instances: 1 });
    expect(await upgraded.list()).to.deep.equal([earlier]);
    expect(await upgraded.get(earlier.id)).to.deep.equal(earlier);
    expect((await agentHealth(earlier.agentUrl!, agentToken)).body).to.include({ ok: true, instanceId: earlier.id });
    expect((await upgraded.create({ offer, idempotencyKey: 'before-upgrade', name: 'again', agentToken })).id).to.equal(earlier.id);
    expect((await upgraded.offers())[0]!.availability).to.equal('unavailable');
    const another = await upgraded.create({ offer, idempotencyKey: 'after-upgrade', name: 'another', agentToken: token() }).catch((error: Error) => error);
    expect(another).to.be.instanceOf(NoCapacityError);
    expect((another as Error).message).to.contain(`${earlier.id} already run`);

    await upgraded.terminate(earlier.id);
    expect(isProcessAlive(pid)).to.equal(false);
    expect(existsSync(singleRecordFile)).to.equal(false);
    expect(await upgraded.list()).to.deep.equal([]);
  });

  it('reports a dead agent as terminated and lets a new instance take its place', async () => {
    await create('stays');
    const first = await create('dies');
    const pid = recordedPid(first.id);
    signalProcessGroup(pid, 'SIGKILL');
    await waitForExit(pid);
    expect(await backend.get(first.id)).to.include({ status: 'terminated', agentUrl: null });
    expect(await availability()).to.equal('available');
    const second = await create('after');
    expect(second.id).not.to.equal(first.id);
    expect(second.status).to.equal('running');
    expect(existsSync(join(stateDir, 'instances', first.id))).to.equal(false);
    expect(existsSync(recordFile(first.id))).to.equal(false);
  });

  it('starts one agent when two servers create with the same key at once', async () => {
    const agentToken = token();
    const other = new LocalBackend({ stateDir, runtime: 'process' });
    const [a, b] = await Promise.all([
      backend.create({ offer, idempotencyKey: 'race', name: 'race', agentToken }),
      other.create({ offer, idempotencyKey: 'race', name: 'race', agentToken }),
    ]);
    expect(a.id).to.equal(b.id);
    expect(agentProcesses()).to.deep.equal([String(recordedPid(a.id))]);
  });

  it('starts no more agents than its instances when servers create with different keys at once', async () => {
    const other = new LocalBackend({ stateDir, runtime: 'process', instances: 2 });
    const results = await Promise.allSettled(['a', 'b', 'c'].map((key, i) => (i % 2 ? other : backend)
      .create({ offer, idempotencyKey: key, name: key, agentToken: token() })));
    expect(results.filter((result) => result.status === 'fulfilled')).to.have.length(2);
    const [refused] = results.filter((result): result is PromiseRejectedResult => result.status === 'rejected');
    expect(refused?.reason).to.be.instanceOf(NoCapacityError);
    expect(agentProcesses()).to.have.length(2);
  });

  it('refuses offers of another backend, a bad instances setting and a corrupt state file with clear errors', async () => {
    const cloudOffer: Offer = { ...offer, backend: 'gpucloud' };
    await backend.create({ offer: cloudOffer, idempotencyKey: 'k', name: 'n', agentToken: token() }).then(
      () => expect.fail('created from a gpucloud offer'),
      (error: Error) => expect(error.message).to.match(/belongs to backend gpucloud, not local/),
    );
    expect(() => new LocalBackend({ stateDir, instances: 0 })).to.throw(BackendError, /instances must be a whole number of at least 1, not 0/);
    for (const file of [join(stateDir, 'local-instance.json'), recordFile('local-corrupt')]) {
      mkdirSync(join(stateDir, 'instances'), { recursive: true });
      writeFileSync(file, '{"id": 1}');
      const corrupt = await backend.list().catch((error: Error) => error);
      expect(corrupt).to.be.instanceOf(BackendError);
      expect((corrupt as Error).message).to.match(/is not a local instance record \(\/\w+: .+\); remove it once no local agent runs$/);
      expect((corrupt as Error).message.startsWith(`${file} `)).to.equal(true);
      rmSync(file);
    }
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
    expect(build({ type: 'aws' })).to.throw(BackendError, /unknown backend type "aws": use gpucloud, local or kubernetes/);
    expect(build({ type: 'local', runtime: 'vm' })).to.throw(BackendError, /invalid local backend config: \/runtime/);
    expect(build({ type: 'local', instances: 0 })).to.throw(BackendError, /invalid local backend config: \/instances: Expected integer to be greater or equal to 1/);
    expect(build({ type: 'local', instances: 1.5 })).to.throw(BackendError, /invalid local backend config: \/instances: Expected integer/);
  });
});
