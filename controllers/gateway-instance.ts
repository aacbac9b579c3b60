import { randomBytes, randomUUID } from 'node:crypto';
import { AgentClient, AgentError } from '../agent/client.js';
import { orchestratorCommand } from '../agent/launch.js';
import { GATEWAY_TOKEN_VARIABLE } from '../api/gateway-process.js';
import { formatDollars, type Offer } from '../api/offer.js';
import { NoCapacityError } from '../backends/backend.js';
import type { Db } from '../store/db.js';
import { setGatewayProcess, setGatewayToken, type GatewayInstance, type GatewayRecord } from '../store/gateways.js';
import { hashToken, newToken } from '../store/projects.js';
import type { BackendPool } from './backend-pool.js';
import { SUPERVISE_MS, watchSilence } from './gateway-silence.js';

const BACKEND = 'gpucloud';
const BOOT_POLL_MS = 500;
const RETRY_MS = 10_000;
const AGENT_TIMEOUT_MS = 5000;

type Event = (gateway: GatewayRecord, reason: string, message: string) => Promise<void>;

/** The cheapest available offer without GPUs: a gateway only moves bytes. */
export function gatewayOffer(offers: Offer[]): Offer | undefined {
  return offers.filter((o) => o.gpu.count === 0 && o.availability === 'available').sort((a, b) => a.pricePerHour - b.pricePerHour)[0];
}

/**
 * Runs each gateway with backend gpucloud on a small CPU instance rented from the project's gpucloud backend: the
 * instance's agent runs `orchestrator gateway-server` as a job. Each step is written before the next is taken (the
 * create request's key before the request), so a server that restarts at any point finds the instance again
 * instead of renting another; a lost instance is replaced, and a deleted gateway's instance is terminated.
 */
export class GatewayInstances {
  constructor(private readonly db: Db, private readonly owner: string, private readonly pool: BackendPool, private readonly serverUrl: string, private readonly event: Event) {}

  async reconcile(gateway: GatewayRecord): Promise<number> {
    const { instance } = gateway;
    if (gateway.status === 'deleting') return this.delete(gateway, instance);
    const backend = await this.pool.backend(gateway.projectId, BACKEND);
    if (!backend) return this.fail(gateway, instance, `backend ${BACKEND} is not configured for project of gateway ${gateway.name}`);
    if (!instance) return this.rent(gateway);
    if (!instance.backendInstanceId) {
      const offer = (await this.pool.offers(gateway.projectId, [BACKEND])).offers.find((o) => o.offerId === instance.offerId);
      if (!offer) return this.replace(gateway, `offer ${instance.offerId} is no longer sold`);
      try {
        const created = await backend.create({ offer, idempotencyKey: instance.key, name: `gateway-${gateway.name}`, agentToken: instance.agentToken });
        await this.save(gateway, { ...instance, backendInstanceId: created.id }, 'starting', `instance ${created.id} provisioning (${offer.offerId}, ${formatDollars(offer.pricePerHour)}/h)`);
        await this.event(gateway, 'Provisioning', `instance ${created.id} at ${BACKEND} (${offer.offerId}, ${formatDollars(offer.pricePerHour)}/h)`);
        return BOOT_POLL_MS;
      } catch (error) {
        if (error instanceof NoCapacityError) return this.replace(gateway, error.message);
        throw error;
      }
    }
    const remote = await backend.get(instance.backendInstanceId);
    if (remote.status === 'terminated' || remote.status === 'failed') {
      return this.replace(gateway, `instance ${instance.backendInstanceId} was lost: ${remote.reason ?? remote.status}`);
    }
    if (remote.status !== 'running' || !remote.agentUrl) return BOOT_POLL_MS;
    const agent = new AgentClient(remote.agentUrl, instance.agentToken, { timeoutMs: AGENT_TIMEOUT_MS });
    const current = { ...instance, agentUrl: remote.agentUrl };
    const job = current.jobId ? await agent.job(current.jobId).catch((error: Error) => (error instanceof AgentError ? null : error)) : null;
    if (job instanceof Error) return watchSilence(this.db, this.owner, gateway, `the agent of instance ${instance.backendInstanceId} does not answer: ${job.message}`);
    const jobRuns = job !== null && (job.state === 'pending' || job.state === 'running');
    if (jobRuns && current.generation === gateway.generation && current.agentUrl === instance.agentUrl) {
      return watchSilence(this.db, this.owner, gateway, `the gateway on instance ${instance.backendInstanceId} has not called the server`);
    }
    if (jobRuns) await agent.stop(current.jobId!).catch(() => undefined);
    if (job === null || jobRuns) return this.startJob(gateway, current, agent, job === null ? 'starting' : `restarting for generation ${gateway.generation}`);
    const output = await agent.logs(current.jobId!, 0).catch(() => null);
    const lines = (output?.entries ?? []).map((entry) => entry.text.trim()).filter((text) => text !== '');
    const lastLine = lines.find((text) => /error/i.test(text)) ?? lines.at(-1);
    const ended = `its job ${current.jobId} ended (${job.state}${job.exitCode === null ? '' : ` with code ${job.exitCode}`})${lastLine ? `: ${lastLine}` : ''}`;
    // Noted on the pass before this one, RETRY_MS ago: time to start it again.
    if (gateway.statusMessage.startsWith(ended)) return this.startJob(gateway, current, agent, 'starting again after its job ended');
    await this.save(gateway, current, 'failed', `${ended}; starting it again in ${RETRY_MS / 1000} s`);
    await this.event(gateway, 'Failed', ended);
    return RETRY_MS;
  }

  private async rent(gateway: GatewayRecord): Promise<number> {
    const listing = await this.pool.offers(gateway.projectId, [BACKEND]);
    const offer = gatewayOffer(listing.offers);
    if (!offer) {
      const why = listing.errors.length ? listing.errors.join('; ') : `${BACKEND} sells no available machine without GPUs`;
      return this.fail(gateway, null, `no instance for the gateway: ${why}`);
    }
    const instance: GatewayInstance = {
      backend: BACKEND, key: randomUUID(), offerId: offer.offerId, pricePerHour: offer.pricePerHour,
      agentToken: randomBytes(24).toString('base64url'), backendInstanceId: null, agentUrl: null, jobId: null, generation: gateway.generation,
    };
    await this.save(gateway, instance, 'starting', `renting ${offer.offerId} at ${formatDollars(offer.pricePerHour)}/h`);
    return 0;
  }

  private async startJob(gateway: GatewayRecord, instance: GatewayInstance, agent: AgentClient, why: string): Promise<number> {
    const token = newToken();
    if (!await setGatewayToken(this.db, gateway.id, this.owner, hashToken(token), why)) return SUPERVISE_MS;
    const { spec } = gateway;
    const httpPort = spec.http_port ?? 80;
    const httpsPort = spec.https_port ?? 443;
    const jobId = `gateway-${gateway.name}-${randomBytes(4).toString('hex')}`;
    const { command, args } = orchestratorCommand();
    await agent.submit({
      jobId, runName: `gateway-${gateway.name}`, commands: [],
      entrypoint: [command, ...args, 'gateway-server', '--server', this.serverUrl, '--host', spec.public_ip === false ? '127.0.0.1' : '0.0.0.0',
        '--http-port', String(httpPort), '--https-port', String(httpsPort)],
      env: { [GATEWAY_TOKEN_VARIABLE]: token }, files: [], ports: [], gpus: 0,
    });
    const host = new URL(instance.agentUrl!).hostname;
    const address = `http://${host}:${httpPort} https://${host}:${httpsPort}`;
    await this.save(gateway, { ...instance, jobId, generation: gateway.generation }, 'starting', `${why}: waiting for its first call`, address);
    await this.event(gateway, 'Started', `gateway-server job ${jobId} on instance ${instance.backendInstanceId} (${formatDollars(instance.pricePerHour)}/h) at ${address}`);
    return SUPERVISE_MS;
  }

  /** The instance is gone or never came: it is terminated (if it exists) and a new one rented on the next pass. */
  private async replace(gateway: GatewayRecord, why: string): Promise<number> {
    await this.terminate(gateway);
    await this.save(gateway, null, 'starting', `${why}; renting another instance`);
    await this.event(gateway, 'InstanceLost', why);
    return SUPERVISE_MS;
  }

  private async fail(gateway: GatewayRecord, instance: GatewayInstance | null, message: string): Promise<number> {
    if (gateway.status !== 'failed' || gateway.statusMessage !== message) {
      await this.save(gateway, instance, 'failed', message);
      await this.event(gateway, 'Failed', message);
    }
    return RETRY_MS;
  }

  private async delete(gateway: GatewayRecord, instance: GatewayInstance | null): Promise<number> {
    await this.terminate(gateway);
    if (await setGatewayProcess(this.db, gateway.id, this.owner, null, null, 'deleted', 'deleted')) {
      await this.event(gateway, 'Deleted', instance?.backendInstanceId ? `instance ${instance.backendInstanceId} terminated` : 'it had no instance');
    }
    return 60_000;
  }

  /** Terminates the gateway's instance, also one whose create was sent but not answered (found by its key). */
  private async terminate(gateway: GatewayRecord): Promise<void> {
    const { instance } = gateway;
    if (!instance) return;
    const backend = await this.pool.backend(gateway.projectId, BACKEND);
    if (!backend) return;
    const ids = instance.backendInstanceId ? [instance.backendInstanceId]
      : (await backend.list()).filter((remote) => remote.idempotencyKey === instance.key).map((remote) => remote.id);
    for (const id of ids) await backend.terminate(id);
  }

  private save(gateway: GatewayRecord, instance: GatewayInstance | null, status: 'starting' | 'failed', message: string, address: string | null = gateway.address): Promise<boolean> {
    return setGatewayProcess(this.db, gateway.id, this.owner, instance, instance ? address : null, status, message);
  }
}
