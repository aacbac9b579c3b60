import type { TSchema, Static } from '@sinclair/typebox';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Offer } from '../../api/offer.js';
import {
  BackendAuthError, BackendError, NoCapacityError,
  type Backend, type BackendCluster, type BackendInstance, type CreateClusterRequest, type CreateInstanceRequest,
} from '../backend.js';
import { firstMismatch } from '../validation.js';
import {
  ErrorBody, GpucloudCluster, GpucloudInstance, InstanceList, OfferList,
  type CreateClusterBody, type CreateInstanceBody, type GpucloudOffer,
} from './api.js';

/** The public gpucloud API; the emulator and self-hosted setups pass their own URL. */
export const GPUCLOUD_API_URL = 'https://api.gpucloud.example/v1';

export interface GpucloudBackendOptions {
  apiUrl?: string;
  apiKey: string;
  /** Limit of one HTTP attempt, answer body included. */
  timeoutMs?: number;
  /** Further attempts after a 429, a 5xx, a timeout or a network error. */
  retries?: number;
}

const DEFAULT_TIMEOUT_MS = 10_000;
const DEFAULT_RETRIES = 4;
const BACKOFF_BASE_MS = 200;
const BACKOFF_MAX_MS = 5_000;
const RETRY_AFTER_MAX_MS = 30_000;
const MIB_PER_GB = 1024;

interface Answer { status: number; body: unknown }

/** Rents instances from gpucloud through its REST API (docs/gpucloud-api.md). */
export class GpucloudBackend implements Backend {
  readonly type = 'gpucloud' as const;
  private readonly apiUrl: string;
  private readonly apiKey: string;
  private readonly timeoutMs: number;
  private readonly retries: number;

  constructor(options: GpucloudBackendOptions) {
    const apiUrl = options.apiUrl ?? GPUCLOUD_API_URL;
    let parsed: URL;
    try {
      parsed = new URL(apiUrl);
    } catch {
      throw new BackendError(`invalid gpucloud API URL: ${apiUrl}`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
      throw new BackendError(`gpucloud API URL must be http(s): ${apiUrl}`);
    }
    if (!options.apiKey) throw new BackendAuthError('gpucloud API key is empty');
    const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const retries = options.retries ?? DEFAULT_RETRIES;
    if (!(timeoutMs > 0)) throw new BackendError(`gpucloud timeout must be > 0 ms, got ${timeoutMs}`);
    if (!Number.isInteger(retries) || retries < 0) throw new BackendError(`gpucloud retries must be a whole number >= 0, got ${retries}`);
    this.apiUrl = apiUrl.replace(/\/+$/, '');
    this.apiKey = options.apiKey;
    this.timeoutMs = timeoutMs;
    this.retries = retries;
  }

  async offers(): Promise<Offer[]> {
    const answer = await this.call('GET', '/offers');
    this.failUnless(answer, 200, 'GET /offers');
    return this.parse(OfferList, answer.body, 'GET /offers').offers.map(toOffer);
  }

  async create(request: CreateInstanceRequest): Promise<BackendInstance> {
    if (request.offer.backend !== 'gpucloud') {
      throw new BackendError(`offer ${request.offer.offerId} belongs to backend ${request.offer.backend}, not gpucloud`);
    }
    const body: CreateInstanceBody = {
      offer_id: request.offer.offerId,
      name: request.name,
      client_token: request.idempotencyKey,
      agent: { token: request.agentToken },
      ...(request.clusterId === undefined ? {} : { cluster_id: request.clusterId }),
    };
    const answer = await this.call('POST', '/instances', body);
    const action = `POST /instances (offer ${request.offer.offerId})`;
    if (answer.status === 409 && ['no_capacity', 'cluster_does_not_fit'].includes(errorCode(answer.body))) {
      throw new NoCapacityError(`gpucloud has no capacity for offer ${request.offer.offerId}: ${errorMessage(answer.body)}`);
    }
    if (answer.status === 404) {
      throw new BackendError(`gpucloud offer ${request.offer.offerId} does not exist (any more): ${errorMessage(answer.body)}`);
    }
    this.failUnless(answer, [200, 201], action);
    return toInstance(this.parse(GpucloudInstance, answer.body, action));
  }

  async createCluster(request: CreateClusterRequest): Promise<BackendCluster> {
    const body: CreateClusterBody = { offer_id: request.offer.offerId, name: request.name, client_token: request.idempotencyKey, size: request.size };
    const action = `POST /clusters (offer ${request.offer.offerId})`;
    const answer = await this.call('POST', '/clusters', body);
    if (answer.status === 409 && errorCode(answer.body) === 'no_capacity') {
      throw new NoCapacityError(`gpucloud cannot place the cluster in ${request.offer.region} now: ${errorMessage(answer.body)}`);
    }
    if (answer.status === 409 && errorCode(answer.body) === 'cluster_does_not_fit') throw new BackendError(errorMessage(answer.body));
    this.failUnless(answer, [200, 201], action);
    const cluster = this.parse(GpucloudCluster, answer.body, action);
    return { id: cluster.id, region: cluster.region };
  }

  async deleteCluster(id: string): Promise<void> {
    const answer = await this.call('DELETE', `/clusters/${encodeURIComponent(id)}`);
    if (answer.status === 404) return;
    this.failUnless(answer, 200, `DELETE /clusters/${id}`);
  }

  async get(id: string): Promise<BackendInstance> {
    const action = `GET /instances/${id}`;
    const answer = await this.call('GET', `/instances/${encodeURIComponent(id)}`);
    if (answer.status === 404) {
      return { id, idempotencyKey: '', status: 'terminated', agentUrl: null, region: '', reason: 'gpucloud does not know this instance' };
    }
    this.failUnless(answer, 200, action);
    return toInstance(this.parse(GpucloudInstance, answer.body, action));
  }

  /** Instances that still exist: provisioning, running or failed; those terminating or terminated are left out. */
  async list(): Promise<BackendInstance[]> {
    const answer = await this.call('GET', '/instances');
    this.failUnless(answer, 200, 'GET /instances');
    return this.parse(InstanceList, answer.body, 'GET /instances').instances
      .filter((instance) => instance.status !== 'terminating' && instance.status !== 'terminated')
      .map(toInstance);
  }

  async terminate(id: string): Promise<void> {
    const answer = await this.call('DELETE', `/instances/${encodeURIComponent(id)}`);
    if (answer.status === 404) return;
    this.failUnless(answer, [200, 202], `DELETE /instances/${id}`);
  }

  /** One API call with retries of 429s, 5xx, timeouts and network errors; every other answer is returned. */
  private async call(method: string, path: string, body?: unknown): Promise<Answer> {
    const url = `${this.apiUrl}${path}`;
    for (let attempt = 0; ; attempt += 1) {
      let failure: BackendError;
      let delayMs = backoffMs(attempt);
      try {
        const response = await fetch(url, {
          method,
          headers: {
            Authorization: `Bearer ${this.apiKey}`,
            Accept: 'application/json',
            ...(body === undefined ? {} : { 'Content-Type': 'application/json' }),
          },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(this.timeoutMs),
        });
        const answer = { status: response.status, body: parseJson(await response.text()) };
        if (answer.status === 401) throw new BackendAuthError('invalid gpucloud API key');
        if (answer.status !== 429 && answer.status < 500) return answer;
        failure = new BackendError(`gpucloud ${method} ${path} answered ${answer.status}: ${errorMessage(answer.body)}`, true);
        delayMs = retryAfterMs(response.headers.get('retry-after')) ?? delayMs;
      } catch (error) {
        if (error instanceof BackendError) throw error;
        failure = transportError(error, method, url, this.timeoutMs);
      }
      if (attempt >= this.retries) throw failure;
      await sleep(delayMs);
    }
  }

  private failUnless(answer: Answer, expected: number | number[], action: string): void {
    if ([expected].flat().includes(answer.status)) return;
    throw new BackendError(`gpucloud refused ${action} (${answer.status} ${errorCode(answer.body)}): ${errorMessage(answer.body)}`);
  }

  private parse<T extends TSchema>(schema: T, body: unknown, action: string): Static<T> {
    const mismatch = firstMismatch(schema, body);
    if (mismatch) throw new BackendError(`gpucloud answered ${action} with an unexpected body: ${mismatch}`);
    return body as Static<T>;
  }
}

function toOffer(offer: GpucloudOffer): Offer {
  return {
    backend: 'gpucloud',
    offerId: offer.id,
    gpu: { name: offer.gpu.model, memoryMib: offer.gpu.memory_gb * MIB_PER_GB, count: offer.gpu.count },
    cpus: offer.vcpus,
    memoryMib: offer.memory_gb * MIB_PER_GB,
    diskMib: offer.disk_gb * MIB_PER_GB,
    region: offer.region,
    pricePerHour: offer.price_per_hour,
    availability: offer.availability,
    spot: offer.spot === true,
  };
}

/** gpucloud's `terminating` is reported as terminated: the machine is going away and takes no more work. */
function toInstance(instance: GpucloudInstance): BackendInstance {
  const status = instance.status === 'terminating' ? 'terminated' : instance.status;
  return {
    id: instance.id,
    idempotencyKey: instance.client_token,
    status,
    agentUrl: status === 'running' ? instance.agent_url : null,
    region: instance.region,
    ...(instance.status_reason ? { reason: instance.status_reason } : {}),
    ...(instance.interrupted ? { interrupted: true } : {}),
    ...(instance.internal_ip ? { internalIp: instance.internal_ip } : {}),
  };
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function errorCode(body: unknown): string {
  return firstMismatch(ErrorBody, body) === null ? (body as ErrorBody).error.code : 'unknown_error';
}

function errorMessage(body: unknown): string {
  if (firstMismatch(ErrorBody, body) === null) return (body as ErrorBody).error.message;
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

function transportError(error: unknown, method: string, url: string, timeoutMs: number): BackendError {
  const name = (error as Error).name;
  if (name === 'TimeoutError' || name === 'AbortError') {
    return new BackendError(`gpucloud ${method} ${url} timed out after ${timeoutMs} ms`, true);
  }
  const cause = (error as { cause?: { code?: string; message?: string } }).cause;
  const detail = cause?.code ?? cause?.message ?? (error as Error).message;
  return new BackendError(`cannot reach gpucloud at ${url}: ${detail}`, true);
}

/** Exponential backoff with jitter: about 200 ms, 400 ms, 800 ms … up to 5 s. */
function backoffMs(attempt: number): number {
  const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** attempt);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** Retry-After as seconds or an HTTP date, bounded; null when absent or unreadable. */
function retryAfterMs(header: string | null): number | null {
  if (!header) return null;
  const seconds = Number(header);
  const ms = Number.isFinite(seconds) ? seconds * 1000 : Date.parse(header) - Date.now();
  if (!Number.isFinite(ms)) return null;
  return Math.min(RETRY_AFTER_MAX_MS, Math.max(0, ms));
}
