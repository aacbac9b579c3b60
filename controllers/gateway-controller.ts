import { rm } from 'node:fs/promises';
import { hostname, networkInterfaces } from 'node:os';
import { join } from 'node:path';
import type { Logger } from 'winston';
import { isProcessAlive, processStartTime, stopProcessGroup, waitForExit } from '../backends/processes.js';
import { startGatewayProcess } from '../gateway/edge/launch.js';
import { CHANNELS } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { recordEvent } from '../store/events.js';
import {
  setGatewayProcess, setGatewayToken, toGateway, type GatewayRecord, type LocalGatewayProcess,
} from '../store/gateways.js';
import { hashToken, newToken } from '../store/projects.js';
import type { BackendPool } from './backend-pool.js';
import { GatewayInstances } from './gateway-instance.js';
import { SUPERVISE_MS, watchSilence } from './gateway-silence.js';
import { LeasedController } from './leased.js';

/** A process on another server's machine is left to that server until it has been silent this long; then this server starts one. */
const TAKE_OVER_AFTER_MS = 30_000;
const RETRY_START_MS = 10_000;
const STOP_GRACE_MS = 5000;

export interface GatewayLaunchSettings {
  /** The server's URL as the gateway process on this machine reaches it. */
  serverUrl: string;
  /** The server's URL as a rented instance reaches it: config.yml's server_url, else the address it listens on. */
  instanceServerUrl: string;
  /** Each gateway's folder (its log) goes under it. */
  stateDir: string;
}

function alive(process: LocalGatewayProcess | null): process is LocalGatewayProcess {
  if (!process || process.host !== hostname() || !isProcessAlive(process.pid)) return false;
  return process.startTime === null || processStartTime(process.pid) === process.startTime;
}

/** An address of this machine that DNS records may point at: the first external IPv4 address, else loopback. */
function machineAddress(): string {
  const external = Object.values(networkInterfaces()).flat().find((entry) => entry && entry.family === 'IPv4' && !entry.internal);
  return external?.address ?? '127.0.0.1';
}

/**
 * Runs each gateway with backend gpucloud on an instance it rents (GatewayInstances), and each with backend local as an `orchestrator gateway-server` process on this machine: starts it
 * with a fresh token, restarts it when it is gone or its spec has a new generation, shows it unreachable when it
 * stops calling, and stops it when the gateway is deleted. The process is detached: it serves on while the server
 * restarts, and the restarted server finds it by its pid and start time instead of starting another.
 */
export class GatewayController extends LeasedController<GatewayRecord> {
  readonly name = 'gateway';

  private readonly instances: GatewayInstances;

  constructor(db: Db, owner: string, logger: Logger, private readonly launch: GatewayLaunchSettings, pool: BackendPool) {
    super(db, owner, logger, { table: 'gateways', channel: CHANNELS.gateways, where: `status <> 'deleted'` });
    this.instances = new GatewayInstances(db, owner, pool, launch.instanceServerUrl, (gateway, reason, message) => this.event(gateway, reason, message));
  }

  protected toRecord(row: Row): GatewayRecord {
    return toGateway(row);
  }

  protected async reconcile(gateway: GatewayRecord): Promise<number> {
    if (gateway.spec.backend === 'gpucloud') return this.instances.reconcile(gateway);
    const running = alive(gateway.process) ? gateway.process : null;
    const silentMs = Date.now() - (gateway.lastSeenAt?.getTime() ?? 0);
    // A deleted gateway's process elsewhere is refused by the server from now on, and ends itself.
    if (gateway.status === 'deleting') {
      if (running) await stopProcessGroup(running.pid, STOP_GRACE_MS, waitForExit(running.pid));
      await rm(this.stateDirOf(gateway), { recursive: true, force: true });
      if (await setGatewayProcess(this.db, gateway.id, this.owner, null, null, 'deleted', 'deleted')) await this.event(gateway, 'Deleted', 'its process stopped');
      return 60_000;
    }
    const elsewhere = gateway.process !== null && gateway.process.host !== hostname() && gateway.status !== 'failed';
    if (running?.generation === gateway.generation || (elsewhere && silentMs < TAKE_OVER_AFTER_MS)) {
      return watchSilence(this.db, this.owner, gateway, `the gateway process (pid ${gateway.process!.pid} on ${gateway.process!.host}) has not called the server`);
    }
    if (running) await stopProcessGroup(running.pid, STOP_GRACE_MS, waitForExit(running.pid));
    return this.start(gateway, running ? `restarting for generation ${gateway.generation}` : gateway.process ? 'its process was gone; starting it again' : 'starting');
  }

  private async start(gateway: GatewayRecord, why: string): Promise<number> {
    const token = newToken();
    if (!await setGatewayToken(this.db, gateway.id, this.owner, hashToken(token), why)) return SUPERVISE_MS;
    const { spec } = gateway;
    const httpPort = spec.http_port ?? 80;
    const httpsPort = spec.https_port ?? 443;
    const publicIp = spec.public_ip ?? true;
    try {
      const started = await startGatewayProcess({
        serverUrl: this.launch.serverUrl, token, host: publicIp ? '0.0.0.0' : '127.0.0.1', httpPort, httpsPort, stateDir: this.stateDirOf(gateway),
      });
      const host = publicIp ? machineAddress() : '127.0.0.1';
      const address = `http://${host}:${httpPort} https://${host}:${httpsPort}`;
      await setGatewayProcess(this.db, gateway.id, this.owner, { host: hostname(), ...started, generation: gateway.generation }, address, 'running', '');
      await this.event(gateway, 'Started', `gateway-server pid ${started.pid} on ${address}`);
      return SUPERVISE_MS;
    } catch (error) {
      const message = `the gateway process did not start: ${(error as Error).message}`;
      await setGatewayProcess(this.db, gateway.id, this.owner, null, null, 'failed', message);
      await this.event(gateway, 'Failed', message);
      return RETRY_START_MS;
    }
  }

  private stateDirOf(gateway: GatewayRecord): string {
    return join(this.launch.stateDir, gateway.id);
  }

  private async event(gateway: GatewayRecord, reason: string, message: string): Promise<void> {
    await recordEvent(this.db, { projectId: gateway.projectId, objectKind: 'gateway', objectId: gateway.id, objectName: gateway.name, reason, message });
  }
}
