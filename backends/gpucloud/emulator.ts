import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { firstMismatch } from '../validation.js';
import { CreateClusterBody, CreateInstanceBody, FaultsPatch, GPU_MODELS, type GpuModel } from './api.js';
import { agentProcesses } from './agent-process.js';
import { ApiError, EmulatedCloud, type AgentRuntime } from './emulated-cloud.js';
import { agentGpuSpec, DEFAULT_CAPACITY_PER_MODEL, type CatalogOffer } from './catalog.js';
import type { GpuInfo } from '../../api/offer.js';
import { NO_GPU, parseGpuSpec } from '../../agent/gpu.js';
import { EmulatorStateDir, type SavedState } from './emulator-state.js';
import type { FaultControl } from './faults.js';
import { DEFAULT_SIMULATED_LOG_LINES, DEFAULT_SIMULATED_TIMINGS, SimulatedAgents } from './simulated-agents.js';
import type { SimulatedTimings } from './simulated-job.js';
import type { AgentKind } from './agent-kinds.js';

export interface EmulatorOptions {
  port?: number;
  host?: string;
  apiKey?: string;
  bootDelayMs?: number;
  /** Instances per GPU model that may exist at once (provisioning, running or terminating). */
  capacity?: Partial<Record<string, number>>;
  /** Parent folder of the instances' agent work folders; when absent, `stateDir`/agents or a temporary one, removed on close. */
  workDir?: string;
  /**
   * Where the emulator keeps its API key (when it generated it) and its instances, so that a restart
   * with the same folder keeps them: their agents run on when it closes, and it takes them back when it starts.
   */
  stateDir?: string;
  agentRuntime?: AgentRuntime;
  /**
   * `process` (the default): each instance boots a real `orchestrator agent` process. `simulated`: the emulator's own
   * process answers every instance's agent API on one port and plays their jobs with timers (docs/gpucloud-api.md),
   * so that one machine holds thousands of instances; `agentRuntime` is then unused.
   */
  agents?: AgentKind;
  /** Simulated agents' timings, and the log entries each of their jobs keeps. */
  simulated?: Partial<SimulatedTimings> & { maxLogLines?: number };
  /** Also sell a machine without GPUs in each region (cpu-x0-<region>), as gateways rent. */
  cpuOffers?: boolean;
  /** Receives one line per instance lifecycle event; never secrets. */
  log?: (line: string) => void;
}

export interface RunningEmulator {
  /** Base URL of the API, ending in /v1. */
  url: string;
  apiKey: string;
  faults: FaultControl;
  /** The simulated agents, when `agents` is `simulated`. */
  simulatedAgents: SimulatedAgents | null;
  close(): Promise<void>;
}

export const DEFAULT_BOOT_DELAY_MS = 3_000;

export class PortInUseError extends Error {
  constructor(readonly port: number) {
    super(`port ${port} is already in use; is another emulator running?`);
    this.name = 'PortInUseError';
  }
}

const MAX_BODY_BYTES = 64 * 1024;

type Handler = (request: IncomingMessage, params: string[]) => Promise<{ status: number; body: unknown }>;
interface Route { pattern: RegExp; methods: Partial<Record<string, Handler>> }

/** Serves the gpucloud API (docs/gpucloud-api.md) on loopback, booting each instance as a real agent process. */
export async function startEmulator(options: EmulatorOptions = {}): Promise<RunningEmulator> {
  if (options.apiKey !== undefined && options.apiKey.length < 8) throw new Error('the emulator API key must be at least 8 characters long');
  const bootDelayMs = options.bootDelayMs ?? DEFAULT_BOOT_DELAY_MS;
  if (!Number.isFinite(bootDelayMs) || bootDelayMs < 0) throw new Error(`invalid boot delay: ${bootDelayMs} ms`);
  const capacity = resolveCapacity(options.capacity ?? {});
  const stateDir = options.stateDir === undefined ? null : new EmulatorStateDir(resolve(options.stateDir));
  const apiKey = options.apiKey ?? stateDir?.apiKey(generateApiKey) ?? generateApiKey();
  const saved = stateDir?.state() ?? { instances: [], clusters: [] };
  const ownsWorkDir = options.workDir === undefined && stateDir === null;
  const workDir = options.workDir ?? (stateDir ? join(stateDir.path, 'agents') : await mkdtemp(join(tmpdir(), 'orchestrator-gpucloud-')));
  const log = options.log ?? (() => {});
  const host = options.host ?? '127.0.0.1';
  let gpuUtilization = (): number | null => null;
  const simulatedAgents = options.agents === 'simulated'
    ? await SimulatedAgents.start({
      host, timings: { ...DEFAULT_SIMULATED_TIMINGS, ...options.simulated }, maxLogLines: options.simulated?.maxLogLines ?? DEFAULT_SIMULATED_LOG_LINES,
      gpuUtilization: () => gpuUtilization(),
    })
    : null;
  const cloud = new EmulatedCloud({
    bootDelayMs, capacity, workDir, cpuOffers: options.cpuOffers ?? false, log,
    launchAgent: simulatedAgents
      ? async ({ instanceId, token, offer }) => simulatedAgents.launch({ instanceId, token, gpu: simulatedGpu(offer), memoryMib: offer.memory_gb * 1024 })
      : agentProcesses(options.agentRuntime ?? 'process'),
    ...(stateDir ? { save: (state: Required<SavedState>) => stateDir.saveState(state) } : {}),
  });
  const { faults } = cloud;
  gpuUtilization = () => faults.gpuUtilization;
  const apiKeyHash = sha256(apiKey);

  const routes: Route[] = [
    { pattern: /^\/v1\/offers$/, methods: { GET: async () => ({ status: 200, body: { offers: cloud.offers() } }) } },
    {
      pattern: /^\/v1\/instances$/,
      methods: {
        GET: async () => ({ status: 200, body: { instances: cloud.list() } }),
        POST: async (request) => {
          const body = await readJson(request);
          const mismatch = firstMismatch(CreateInstanceBody, body);
          if (mismatch) throw new ApiError(400, 'invalid_request', `invalid instance request: ${mismatch}`);
          const { instance, created } = cloud.create(body as CreateInstanceBody);
          return { status: created ? 201 : 200, body: instance };
        },
      },
    },
    { pattern: /^\/v1\/usage$/, methods: { GET: async () => ({ status: 200, body: cloud.usage() }) } },
    {
      pattern: /^\/v1\/instances\/([^/]+)$/,
      methods: {
        GET: async (_request, [id]) => ({ status: 200, body: cloud.get(id!) }),
        DELETE: async (_request, [id]) => ({ status: 202, body: cloud.terminate(id!) }),
      },
    },
    {
      pattern: /^\/v1\/clusters$/,
      methods: {
        GET: async () => ({ status: 200, body: { clusters: cloud.listClusters() } }),
        POST: async (request) => {
          const body = await readJson(request);
          const mismatch = firstMismatch(CreateClusterBody, body);
          if (mismatch) throw new ApiError(400, 'invalid_request', `invalid cluster request: ${mismatch}`);
          const { cluster, created } = cloud.createCluster(body as CreateClusterBody);
          return { status: created ? 201 : 200, body: cluster };
        },
      },
    },
    {
      pattern: /^\/v1\/clusters\/([^/]+)$/,
      methods: {
        GET: async (_request, [id]) => ({ status: 200, body: cloud.getCluster(id!) }),
        DELETE: async (_request, [id]) => ({ status: 200, body: cloud.deleteCluster(id!) }),
      },
    },
    {
      pattern: /^\/v1\/_emulator\/faults$/,
      methods: {
        GET: async () => ({ status: 200, body: faults.state() }),
        POST: async (request) => {
          const body = await readJson(request);
          const mismatch = firstMismatch(FaultsPatch, body);
          if (mismatch) throw new ApiError(400, 'invalid_request', `invalid faults: ${mismatch}`);
          const patch = body as FaultsPatch;
          for (const id of [...(patch.kill_instances ?? []), ...(patch.interrupt_instances ?? [])]) cloud.get(id);
          await faults.apply(patch);
          return { status: 200, body: faults.state() };
        },
      },
    },
    {
      pattern: /^\/v1\/_emulator\/state$/,
      methods: {
        GET: async () => ({
          status: 200,
          body: {
            instances: cloud.list().map((instance) => ({ ...instance, agent_pid: cloud.agentPid(instance.id) })),
            faults: faults.state(),
            capacity: cloud.capacityState(),
          },
        }),
      },
    },
  ];

  const answer = async (request: IncomingMessage, response: ServerResponse): Promise<void> => {
    const path = new URL(request.url ?? '/', 'http://emulator').pathname.replace(/\/+$/, '');
    if (!path.startsWith('/v1/_emulator/')) {
      if (faults.slowMs > 0) await sleep(faults.slowMs);
      const fault = faults.takeCallFault();
      if (fault === 'rate_limit') {
        sendError(response, new ApiError(429, 'rate_limited', 'too many requests: retry after 1 second'), { 'Retry-After': '1' });
        return;
      }
      if (fault === 'api_error') {
        sendError(response, new ApiError(500, 'internal_error', 'internal error (injected fault)'));
        return;
      }
    }
    if (!authorized(request.headers.authorization, apiKeyHash)) {
      sendError(response, new ApiError(401, 'invalid_api_key', 'missing or invalid API key: send Authorization: Bearer <api_key>'));
      return;
    }
    const route = routes.find((candidate) => candidate.pattern.test(path));
    if (!route) throw new ApiError(404, 'not_found', `no such route: ${request.method} ${path}`);
    const handler = route.methods[request.method ?? ''];
    if (!handler) {
      const allowed = Object.keys(route.methods).join(', ');
      sendError(response, new ApiError(405, 'method_not_allowed', `${request.method} is not allowed on ${path}; use ${allowed}`), { Allow: allowed });
      return;
    }
    const params = route.pattern.exec(path)!.slice(1).map((param) => decodeURIComponent(param));
    const { status, body } = await handler(request, params);
    sendJson(response, status, body);
  };

  const server = createServer((request, response) => {
    answer(request, response).catch((error: unknown) => {
      if (error instanceof ApiError) {
        sendError(response, error);
        return;
      }
      log(`internal error on ${request.method} ${request.url}: ${(error as Error).stack ?? String(error)}`);
      sendError(response, new ApiError(500, 'internal_error', 'internal error'));
    });
  });
  try {
    await new Promise<void>((resolveListen, reject) => {
      server.once('error', reject);
      server.listen(options.port ?? 0, host, () => {
        server.off('error', reject);
        resolveListen();
      });
    });
  } catch (error) {
    if (ownsWorkDir) await rm(workDir, { recursive: true, force: true });
    await simulatedAgents?.close();
    if ((error as NodeJS.ErrnoException).code === 'EADDRINUSE') throw new PortInUseError(options.port ?? 0);
    throw error;
  }
  cloud.restore(saved);
  const { port } = server.address() as AddressInfo;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  let closing: Promise<void> | null = null;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeAllConnections();
      await Promise.all([stopped, cloud.close()]);
      await simulatedAgents?.close();
      if (ownsWorkDir) await rm(workDir, { recursive: true, force: true });
    })();
    return closing;
  };
  return { url: `http://${urlHost}:${port}/v1`, apiKey, faults, simulatedAgents, close };
}

/** The GPUs a simulated agent reports for a machine of this offer, as `--gpu` makes a real one report them. */
function simulatedGpu(offer: CatalogOffer): GpuInfo {
  const spec = agentGpuSpec(offer);
  return spec === undefined ? NO_GPU : parseGpuSpec(spec);
}

function generateApiKey(): string {
  return `gc_${randomBytes(24).toString('base64url')}`;
}

function resolveCapacity(requested: Partial<Record<string, number>>): Record<GpuModel, number> {
  const capacity = Object.fromEntries(GPU_MODELS.map((model) => [model, DEFAULT_CAPACITY_PER_MODEL])) as Record<GpuModel, number>;
  for (const [model, limit] of Object.entries(requested)) {
    if (!(GPU_MODELS as readonly string[]).includes(model)) {
      throw new Error(`unknown GPU model in capacity: ${model} (known: ${GPU_MODELS.join(', ')})`);
    }
    if (limit === undefined) continue;
    if (!Number.isInteger(limit) || limit < 0) throw new Error(`capacity of ${model} must be a whole number >= 0, got ${limit}`);
    capacity[model as GpuModel] = limit;
  }
  return capacity;
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

function authorized(header: string | undefined, apiKeyHash: Buffer): boolean {
  const match = /^Bearer (.+)$/.exec(header ?? '');
  return match !== null && timingSafeEqual(sha256(match[1]!), apiKeyHash);
}

async function readJson(request: IncomingMessage): Promise<unknown> {
  if (Number(request.headers['content-length'] ?? 0) > MAX_BODY_BYTES) {
    throw new ApiError(413, 'payload_too_large', `request body is larger than ${MAX_BODY_BYTES} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new ApiError(413, 'payload_too_large', `request body is larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError(400, 'invalid_json', 'request body must be a JSON object');
  }
}

function sendJson(response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (response.destroyed || response.headersSent) return;
  const text = JSON.stringify(body);
  response.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Content-Length': Buffer.byteLength(text), ...headers });
  response.end(text);
}

function sendError(response: ServerResponse, error: ApiError, headers: Record<string, string> = {}): void {
  sendJson(response, error.status, { error: { code: error.code, message: error.message } }, headers);
}
