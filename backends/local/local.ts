import { randomBytes } from 'node:crypto';
import { mkdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Offer } from '../../api/offer.js';
import { startAgentProcess } from '../../agent/launch.js';
import {
  BackendError, NoCapacityError,
  type Backend, type BackendInstance, type CreateInstanceRequest,
} from '../backend.js';
import { isProcessAlive, processStartTime, stopProcessGroup, waitForExit } from '../processes.js';
import { withFileLock } from './file-lock.js';
import { describeMachine } from './machine.js';
import { LocalInstanceState, type LocalInstanceRecord } from './state.js';

export type LocalRuntime = 'auto' | 'docker' | 'process';

export interface LocalBackendOptions {
  stateDir: string;
  runtime?: LocalRuntime;
  /** How many instances (agents) may run on this machine at once; each may use the whole machine. */
  instances?: number;
}

export const LOCAL_OFFER_ID = 'local';
export const LOCAL_REGION = 'local';
export const DEFAULT_LOCAL_INSTANCES = 4;
const RUNTIMES: readonly LocalRuntime[] = ['auto', 'docker', 'process'];
/** Long enough for a concurrent create, which starts an agent, to finish. */
const LOCK_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 5_000;

/**
 * This machine as a backend of up to `instances` instances, each an `orchestrator agent` started detached with its
 * own work folder and token, recorded under stateDir so that a restarted server finds them again.
 */
export class LocalBackend implements Backend {
  readonly type = 'local' as const;
  private readonly stateDir: string;
  private readonly runtime: LocalRuntime;
  private readonly maxInstances: number;
  private readonly state: LocalInstanceState;
  private readonly lockFile: string;

  constructor(options: LocalBackendOptions) {
    if (!options.stateDir) throw new BackendError('the local backend needs a state folder');
    const runtime = options.runtime ?? 'auto';
    if (!RUNTIMES.includes(runtime)) throw new BackendError(`unknown agent runtime ${runtime}: use ${RUNTIMES.join(', ')}`);
    const maxInstances = options.instances ?? DEFAULT_LOCAL_INSTANCES;
    if (!Number.isInteger(maxInstances) || maxInstances < 1) {
      throw new BackendError(`the local backend's instances must be a whole number of at least 1, not ${maxInstances}`);
    }
    this.stateDir = options.stateDir;
    this.runtime = runtime;
    this.maxInstances = maxInstances;
    this.state = new LocalInstanceState(options.stateDir);
    this.lockFile = join(options.stateDir, 'local-instance.lock');
  }

  async offers(): Promise<Offer[]> {
    await mkdir(this.stateDir, { recursive: true });
    const [machine, records] = await Promise.all([describeMachine(this.stateDir), this.state.readAll()]);
    return [{
      backend: 'local',
      offerId: LOCAL_OFFER_ID,
      ...machine,
      region: LOCAL_REGION,
      pricePerHour: 0,
      availability: records.filter(isAgentAlive).length < this.maxInstances ? 'available' : 'unavailable',
    }];
  }

  async create(request: CreateInstanceRequest): Promise<BackendInstance> {
    if (request.offer.backend !== 'local') {
      throw new BackendError(`offer ${request.offer.offerId} belongs to backend ${request.offer.backend}, not local`);
    }
    await mkdir(this.stateDir, { recursive: true });
    return withFileLock(this.lockFile, LOCK_TIMEOUT_MS, async () => {
      const records = await this.state.readAll();
      const live = records.filter(isAgentAlive);
      const same = live.find((record) => record.idempotencyKey === request.idempotencyKey);
      if (same) return toInstance(same);
      for (const dead of records.filter((record) => !live.includes(record))) await this.forget(dead);
      if (live.length >= this.maxInstances) {
        throw new NoCapacityError(`no room for another local instance: ${live.map((record) => record.id).join(', ')} already run, `
          + `the most that the local backend's setting instances: ${this.maxInstances} allows; raise it in the server's config.yml to run more at once`);
      }
      return toInstance(await this.startAgent(request));
    });
  }

  async get(id: string): Promise<BackendInstance> {
    const record = await this.state.find(id);
    if (record) return toInstance(record);
    return { id, idempotencyKey: '', status: 'terminated', agentUrl: null, region: LOCAL_REGION, reason: 'no such local instance' };
  }

  async list(): Promise<BackendInstance[]> {
    return (await this.state.readAll()).map(toInstance);
  }

  async terminate(id: string): Promise<void> {
    await mkdir(this.stateDir, { recursive: true });
    await withFileLock(this.lockFile, LOCK_TIMEOUT_MS, async () => {
      const record = await this.state.find(id);
      if (!record) return;
      if (isAgentAlive(record)) await stopProcessGroup(record.pid, STOP_GRACE_MS, waitForExit(record.pid));
      await this.forget(record);
    });
  }

  private async startAgent(request: CreateInstanceRequest): Promise<LocalInstanceRecord> {
    const id = `local-${randomBytes(6).toString('hex')}`;
    const workDir = join(this.state.instancesDir, id);
    await mkdir(workDir, { recursive: true });
    const { child, url } = await startAgentProcess({
      token: request.agentToken,
      instanceId: id,
      runtime: this.runtime,
      workDir,
      // A server whose folder is gone will never come back for this agent: it must not outlive it.
      exitWhenMissing: workDir,
      detached: true,
    });
    // The agent must outlive this server: nothing of this process may keep it, or be kept by it.
    child.unref();
    child.stdout?.destroy();
    child.stderr?.destroy();
    const pid = child.pid!;
    const record: LocalInstanceRecord = {
      id,
      idempotencyKey: request.idempotencyKey,
      pid,
      processStartTime: processStartTime(pid),
      agentUrl: url,
      workDir,
      createdAt: new Date().toISOString(),
    };
    try {
      await this.state.write(record);
    } catch (error) {
      await stopProcessGroup(pid, STOP_GRACE_MS, waitForExit(pid));
      throw error;
    }
    return record;
  }

  private async forget(record: LocalInstanceRecord): Promise<void> {
    await this.state.forget(record.id);
    await rm(record.workDir, { recursive: true, force: true });
  }
}

function isAgentAlive(record: LocalInstanceRecord): boolean {
  if (!isProcessAlive(record.pid)) return false;
  return record.processStartTime === null || processStartTime(record.pid) === record.processStartTime;
}

function toInstance(record: LocalInstanceRecord): BackendInstance {
  const alive = isAgentAlive(record);
  return {
    id: record.id,
    idempotencyKey: record.idempotencyKey,
    status: alive ? 'running' : 'terminated',
    agentUrl: alive ? record.agentUrl : null,
    region: LOCAL_REGION,
    ...(alive ? {} : { reason: 'the local agent process is gone' }),
  };
}
