import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AddressInfo } from 'node:net';
import type { Offer } from '../api/offer.js';
import { BackendAuthError, BackendError, NoCapacityError } from '../backends/backend.js';
import { GpucloudBackend } from '../backends/gpucloud/client.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { isProcessAlive, waitForExit } from '../backends/processes.js';
import { agentHealth, waitForStatus } from './helpers/backend-waits.js';

const token = () => randomBytes(24).toString('hex');

async function eventually(condition: () => boolean | Promise<boolean>, failure: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!await condition()) {
    if (Date.now() > deadline) expect.fail(failure);
    await sleep(50);
  }
}

describe('gpucloud backend against the emulator', function () {
  this.timeout(60_000);
  let emulator: RunningEmulator;
  let cloud: GpucloudBackend;
  let offers: Offer[];
  let workDir: string;
  const offer = (id: string) => {
    const found = offers.find((candidate) => candidate.offerId === id);
    if (!found) throw new Error(`no offer ${id}`);
    return found;
  };
  const create = (offerId: string, idempotencyKey = `key-${randomBytes(6).toString('hex')}`, agentToken = token()) =>
    cloud.create({ offer: offer(offerId), idempotencyKey, name: `test-${idempotencyKey}`, agentToken });
  const agentPid = async (id: string): Promise<number> => {
    const response = await fetch(`${emulator.url}/_emulator/state`, { headers: { authorization: `Bearer ${emulator.apiKey}` } });
    const state = await response.json() as { instances: { id: string; agent_pid: number | null }[] };
    const pid = state.instances.find((instance) => instance.id === id)?.agent_pid;
    if (!pid) throw new Error(`instance ${id} has no agent process`);
    return pid;
  };

  before(async () => {
    workDir = mkdtempSync(join(tmpdir(), 'gpucloud-machines-'));
    emulator = await startEmulator({ bootDelayMs: 50, capacity: { L4: 1 }, workDir });
    cloud = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey, timeoutMs: 5_000 });
    offers = await cloud.offers();
  });
  after(async () => {
    await emulator?.close();
    rmSync(workDir, { recursive: true, force: true });
  });
  afterEach(() => {
    emulator.faults.noCapacity.clear();
    emulator.faults.apiErrors = 0;
    emulator.faults.rateLimit = 0;
    emulator.faults.slowMs = 0;
  });

  it('lists every GPU model at 1, 2, 4 and 8 GPUs, mapped to offers with sizes in MiB', () => {
    for (const model of ['L4', 'H100', 'H200', 'RTXPRO6000']) {
      const counts = offers.filter((candidate) => candidate.gpu.name === model).map((candidate) => candidate.gpu.count);
      expect([...new Set(counts)].sort((a, b) => a - b), model).to.deep.equal([1, 2, 4, 8]);
    }
    expect(offer('h100-x2-us-east-1')).to.deep.equal({
      backend: 'gpucloud',
      offerId: 'h100-x2-us-east-1',
      gpu: { name: 'H100', memoryMib: 80 * 1024, count: 2 },
      cpus: 52,
      memoryMib: 450 * 1024,
      diskMib: 2000 * 1024,
      region: 'us-east-1',
      pricePerHour: 5,
      availability: 'available',
      spot: false,
    });
    expect(offer('l4-x1-eu-west-1').pricePerHour).to.equal(0.8);
    expect(offer('l4-x1-eu-west-1-spot')).to.include({ pricePerHour: 0.32, spot: true });
    expect(offer('h200-x8-us-east-1').pricePerHour).to.equal(28);
  });

  it('creates an instance that provisions, runs a healthy agent that demands its token, and terminating stops it', async () => {
    const agentToken = token();
    const created = await create('h100-x2-us-east-1', 'boot-key', agentToken);
    expect(created).to.include({ status: 'provisioning', agentUrl: null, idempotencyKey: 'boot-key', region: 'us-east-1' });
    const running = await waitForStatus(cloud, created.id, 'running');
    expect(running.agentUrl).to.match(/^http:\/\/127\.0\.0\.1:\d+$/);
    const health = await agentHealth(running.agentUrl!, agentToken);
    expect(health.status).to.equal(200);
    expect(health.body).to.include({ ok: true, instanceId: created.id });
    expect(health.body.gpu).to.deep.equal({ name: 'H100', memoryMib: 80 * 1024, count: 2 });
    expect((await agentHealth(running.agentUrl!, 'not-the-token')).status).to.equal(401);
    expect((await cloud.list()).map((instance) => instance.id)).to.include(created.id);

    const pid = await agentPid(created.id);
    expect(existsSync(join(workDir, created.id))).to.equal(true);
    await cloud.terminate(created.id);
    await waitForStatus(cloud, created.id, 'terminated');
    await waitForExit(pid);
    await eventually(() => !existsSync(join(workDir, created.id)), 'the terminated machine\'s folder was not removed');
    await agentHealth(running.agentUrl!, agentToken).then(
      () => expect.fail('the agent still answers after termination'),
      (error: Error) => expect(error.message).to.match(/fetch failed/),
    );
    await cloud.terminate(created.id);
    expect((await cloud.list()).map((instance) => instance.id)).not.to.include(created.id);
  });

  it('returns the first instance when a create is repeated with the same idempotency key', async () => {
    const first = await create('rtxpro6000-x1-eu-west-1', 'repeat-key');
    const again = await create('rtxpro6000-x1-eu-west-1', 'repeat-key');
    expect(again.id).to.equal(first.id);
    const withKey = (await cloud.list()).filter((instance) => instance.idempotencyKey === 'repeat-key');
    expect(withKey).to.have.length(1);
    const otherOffer = await create('rtxpro6000-x2-eu-west-1', 'repeat-key').catch((error: Error) => error);
    expect(otherOffer).to.be.instanceOf(BackendError).and.not.instanceOf(NoCapacityError);
    expect((otherOffer as BackendError).message).to.match(/already used/);
    await cloud.terminate(first.id);
  });

  it('reports an instance gpucloud does not know as terminated, and terminating it succeeds', async () => {
    expect(await cloud.get('i-0000000000000000')).to.include({ id: 'i-0000000000000000', status: 'terminated', agentUrl: null });
    await cloud.terminate('i-0000000000000000');
  });

  it('maps a wrong API key to BackendAuthError without retrying', async () => {
    const stranger = new GpucloudBackend({ apiUrl: emulator.url, apiKey: 'wrong-key-123', retries: 3 });
    emulator.faults.apiErrors = 0;
    const error = await stranger.offers().catch((caught: Error) => caught);
    expect(error).to.be.instanceOf(BackendAuthError);
    expect((error as BackendAuthError).message).to.equal('invalid gpucloud API key');
    expect((error as BackendAuthError).retryable).to.equal(false);
  });

  it('maps exhausted capacity to NoCapacityError and shows the offers unavailable until capacity frees', async () => {
    const first = await create('l4-x1-us-east-1');
    const refused = await create('l4-x2-eu-west-1').catch((error: Error) => error);
    expect(refused).to.be.instanceOf(NoCapacityError);
    expect((refused as NoCapacityError).retryable).to.equal(true);
    expect((await cloud.offers()).filter((candidate) => candidate.gpu.name === 'L4').map((candidate) => candidate.availability))
      .to.satisfy((availability: string[]) => availability.every((value) => value === 'unavailable'));
    await cloud.terminate(first.id);
    await eventually(async () => (await cloud.offers()).find((candidate) => candidate.offerId === 'l4-x2-eu-west-1')!.availability === 'available',
      'L4 capacity was not freed after termination');
    const later = await create('l4-x2-eu-west-1');
    await cloud.terminate(later.id);
  });

  it('refuses creates for a model whose capacity is switched off by a fault', async () => {
    emulator.faults.noCapacity.add('H200');
    expect(await create('h200-x4-eu-west-1').catch((error: Error) => error)).to.be.instanceOf(NoCapacityError);
    expect(offer('h100-x1-us-east-1').availability).to.equal('available');
    expect((await cloud.offers()).find((candidate) => candidate.offerId === 'h200-x4-eu-west-1')?.availability).to.equal('unavailable');
    emulator.faults.noCapacity.add('*');
    expect(await create('h100-x1-us-east-1').catch((error: Error) => error)).to.be.instanceOf(NoCapacityError);
  });

  it('retries 429 (honouring Retry-After) and 5xx answers, then succeeds', async () => {
    emulator.faults.rateLimit = 1;
    emulator.faults.apiErrors = 2;
    const started = Date.now();
    expect(await cloud.offers()).to.have.length(offers.length);
    expect(Date.now() - started).to.be.at.least(1_000);
    expect(emulator.faults.state()).to.include({ rate_limit: 0, api_errors: 0 });
  });

  it('gives up after its bounded retries with a retryable BackendError', async () => {
    emulator.faults.apiErrors = 10;
    const impatient = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey, retries: 2 });
    const error = await impatient.offers().catch((caught: Error) => caught);
    expect(error).to.be.instanceOf(BackendError);
    expect((error as BackendError).retryable).to.equal(true);
    expect((error as BackendError).message).to.match(/answered 500/);
    expect(emulator.faults.apiErrors).to.equal(7);
  });

  it('times out a slow answer', async () => {
    emulator.faults.slowMs = 2_000;
    const hasty = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey, timeoutMs: 150, retries: 0 });
    const started = Date.now();
    const error = await hasty.offers().catch((caught: Error) => caught);
    expect(Date.now() - started).to.be.below(1_500);
    expect(error).to.be.instanceOf(BackendError);
    expect((error as BackendError).retryable).to.equal(true);
    expect((error as BackendError).message).to.match(/timed out after 150 ms/);
  });

  it('reports an unreachable API as a retryable BackendError', async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const lost = new GpucloudBackend({ apiUrl: `http://127.0.0.1:${closedPort}/v1`, apiKey: 'any-key-123', retries: 1 });
    const error = await lost.offers().catch((caught: Error) => caught);
    expect(error).to.be.instanceOf(BackendError);
    expect((error as BackendError).retryable).to.equal(true);
    expect((error as BackendError).message).to.match(/cannot reach gpucloud .*ECONNREFUSED/);
  });

  it('marks an instance failed when its machine vanishes', async () => {
    const { id } = await create('h100-x8-eu-west-1');
    await waitForStatus(cloud, id, 'running');
    const pid = await agentPid(id);
    await emulator.faults.killInstance(id);
    const failed = await cloud.get(id);
    expect(failed).to.include({ status: 'failed', agentUrl: null });
    expect(failed.reason).to.match(/stopped unexpectedly/);
    expect(isProcessAlive(pid)).to.equal(false);
    expect((await cloud.list()).map((instance) => instance.id)).to.include(id);
    expect(existsSync(join(workDir, id))).to.equal(true);
  });

  it('marks an instance failed when its agent exits on its own', async () => {
    const { id } = await create('h100-x4-us-east-1');
    await waitForStatus(cloud, id, 'running');
    process.kill(await agentPid(id), 'SIGTERM');
    const failed = await waitForStatus(cloud, id, 'failed');
    expect(failed.reason).to.match(/agent exited on its own/);
  });

  it('rejects offers of another backend before calling the API', async () => {
    const local: Offer = { ...offer('l4-x1-us-east-1'), backend: 'local' };
    const error = await cloud.create({ offer: local, idempotencyKey: 'k', name: 'n', agentToken: token() }).catch((caught: Error) => caught);
    expect(error).to.be.instanceOf(BackendError);
    expect((error as Error).message).to.match(/belongs to backend local/);
  });

  it('refuses a malformed API URL', () => {
    expect(() => new GpucloudBackend({ apiUrl: 'not a url', apiKey: 'key' })).to.throw(BackendError, /invalid gpucloud API URL/);
    expect(() => new GpucloudBackend({ apiUrl: 'ftp://host/v1', apiKey: 'key' })).to.throw(BackendError, /must be http/);
  });
});

describe('gpucloud emulator shutdown', function () {
  this.timeout(60_000);

  it('stops every agent it booted when it closes', async () => {
    const emulator = await startEmulator({ bootDelayMs: 0 });
    const cloud = new GpucloudBackend({ apiUrl: emulator.url, apiKey: emulator.apiKey });
    const [target] = (await cloud.offers()).filter((candidate) => candidate.gpu.name === 'L4');
    const { id } = await cloud.create({ offer: target!, idempotencyKey: 'shutdown', name: 'shutdown', agentToken: token() });
    const running = await waitForStatus(cloud, id, 'running');
    const response = await fetch(`${emulator.url}/_emulator/state`, { headers: { authorization: `Bearer ${emulator.apiKey}` } });
    const pid = ((await response.json()) as { instances: { agent_pid: number }[] }).instances[0]!.agent_pid;
    await emulator.close();
    expect(isProcessAlive(pid)).to.equal(false);
    await fetch(`${running.agentUrl}/api/health`).then(
      () => expect.fail('the agent still answers after the emulator closed'),
      (error: Error) => expect(error.message).to.match(/fetch failed/),
    );
  });
});
