import type Docker from 'dockerode';
import { Agent, type ClientRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Context } from 'koa';
import { createProxyMiddleware, debugProxyErrorsPlugin, type Plugin, type RequestHandler } from 'http-proxy-middleware';
import type { JobStatus, JobSubmission } from '../api/agent.js';
import { LABELS } from './docker-runtime.js';
import { HttpError, type ErrorBody } from './http-errors.js';
import type { JobManager } from './jobs.js';

/** How long a job may take, once the request reached it whole, to start its answer. */
export const DEFAULT_FIRST_BYTE_TIMEOUT_MS = 60_000;

export interface Upstream {
  host: string;
  port: number;
}

/** Where a running job's declared ports are reached on this machine. */
export interface JobPorts {
  /** Records a newly submitted job's declared ports (runtimes that cannot look them up later keep them). */
  submitted(submission: JobSubmission): void;
  removed(jobId: string): void;
  /** Undefined when the job did not declare `port`. */
  upstream(job: JobStatus, port: number): Promise<Upstream | undefined>;
}

/** Process jobs listen on this machine's loopback, on the port they declared. */
export class ProcessJobPorts implements JobPorts {
  private readonly declared = new Map<string, ReadonlySet<number>>();

  submitted(submission: JobSubmission): void {
    this.declared.set(submission.jobId, new Set(submission.ports));
  }

  removed(jobId: string): void {
    this.declared.delete(jobId);
  }

  async upstream(job: JobStatus, port: number): Promise<Upstream | undefined> {
    return this.declared.get(job.jobId)?.has(port) ? { host: '127.0.0.1', port } : undefined;
  }
}

/**
 * A container's declared ports are the ones published for it; the engine says where each was bound,
 * so a container re-attached by a later agent is reached as well as one it started.
 */
export class DockerJobPorts implements JobPorts {
  /** Per job and start: bindings do not change while a container runs. */
  private readonly published = new Map<string, { startedAt: string | null; ports: Map<number, Upstream> }>();

  constructor(private readonly docker: Docker, private readonly instanceId: string) {}

  submitted(): void {}

  removed(jobId: string): void {
    this.published.delete(jobId);
  }

  async upstream(job: JobStatus, port: number): Promise<Upstream | undefined> {
    let known = this.published.get(job.jobId);
    if (known?.startedAt !== job.startedAt) {
      known = { startedAt: job.startedAt, ports: await this.bindings(job.jobId) };
      this.published.set(job.jobId, known);
    }
    return known.ports.get(port);
  }

  private async bindings(jobId: string): Promise<Map<number, Upstream>> {
    const containers = await this.docker.listContainers({
      filters: { label: [`${LABELS.instanceId}=${this.instanceId}`, `${LABELS.jobId}=${jobId}`] },
    });
    const ports = new Map<number, Upstream>();
    for (const binding of containers[0]?.Ports ?? []) {
      if (binding.Type === 'tcp' && binding.PublicPort) {
        ports.set(binding.PrivatePort, { host: reachableAddress(binding.IP), port: binding.PublicPort });
      }
    }
    return ports;
  }
}

/** A port bound to every address is reached on loopback. */
function reachableAddress(boundTo: string | undefined): string {
  if (!boundTo || boundTo === '0.0.0.0') return '127.0.0.1';
  if (boundTo === '::') return '::1';
  return boundTo;
}

/** `/api/jobs/<id>/ports/<port><path>`, read from the raw request line so that no decoding can move the target. */
const FORWARD_URL = /^\/api\/jobs\/([^/?#]+)\/ports\/([^/?#]*)([^?#]*)(\?[^#]*)?/;

interface ForwardRequest {
  jobId: string;
  /** As written in the path; only digits name a port. */
  port: string;
  upstreamPath: string;
}

function parseForwardUrl(url: string): ForwardRequest | undefined {
  const match = FORWARD_URL.exec(url);
  if (!match) return undefined;
  const [, rawJobId, rawPort, path, query] = match;
  let jobId: string;
  try {
    jobId = decodeURIComponent(rawJobId!);
  } catch {
    return undefined;
  }
  return {
    jobId,
    port: rawPort!,
    upstreamPath: `${path || '/'}${query ?? ''}`,
  };
}

class UpstreamTimeout extends Error {
  constructor(ms: number) {
    super(`the job did not answer within ${ms} ms`);
    this.name = 'UpstreamTimeout';
  }
}

function upstreamFailure(error: Error & { code?: string }): HttpError {
  if (error instanceof UpstreamTimeout) return new HttpError(504, 'upstream_timeout', error.message);
  if (error.code === 'ECONNREFUSED') return new HttpError(502, 'upstream_refused', 'nothing listens on the job\'s port');
  return new HttpError(502, 'upstream_failed', `the connection to the job's port failed: ${error.message}`);
}

function errorBody(error: HttpError): string {
  const body: ErrorBody = { error: { code: error.code, message: error.message } };
  return JSON.stringify(body);
}

/** Answers an upgrade request that will not be forwarded, on its raw socket. */
function refuseUpgrade(socket: Duplex, error: HttpError, headers: Record<string, string> = {}): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const body = errorBody(error);
  const head = Object.entries({ ...headers, 'Content-Type': 'application/json', 'Content-Length': String(Buffer.byteLength(body)), Connection: 'close' })
    .map(([name, value]) => `${name}: ${value}\r\n`).join('');
  socket.end(`HTTP/1.1 ${error.status} ${error.code}\r\n${head}\r\n${body}`);
}

export interface PortForwardOptions {
  jobs: JobManager;
  ports: JobPorts;
  /** Whether an upgrade request carries the agent's token (plain requests pass the Koa middleware first). */
  authorized(authorization: string | undefined): boolean;
  firstByteTimeoutMs: number;
}

/**
 * Forwards requests and WebSocket upgrades to a running job's declared port, streaming both ways.
 * The request's path picks the job and the port; the address is always the job's own.
 */
export class PortForward {
  private readonly upstreams = new WeakMap<IncomingMessage, string>();
  private readonly proxy: RequestHandler;
  private readonly upstreamAgent = new Agent({ keepAlive: true });
  /** Upgraded connections: the HTTP server no longer closes them itself. */
  private readonly tunnels = new Set<Duplex>();

  constructor(private readonly options: PortForwardOptions) {
    const { firstByteTimeoutMs } = options;
    const awaitFirstByte = (proxyReq: ClientRequest) => {
      proxyReq.once('finish', () => {
        const timer = setTimeout(() => proxyReq.destroy(new UpstreamTimeout(firstByteTimeoutMs)), firstByteTimeoutMs);
        const answered = () => clearTimeout(timer);
        proxyReq.once('response', answered).once('upgrade', answered).once('close', answered);
      });
    };
    const events: Plugin = (server) => {
      server.on('proxyReq', awaitFirstByte);
      server.on('proxyReqWs', awaitFirstByte);
      server.on('error', (error: Error, _req: IncomingMessage, answer: ServerResponse | Duplex) => {
        const failure = upstreamFailure(error);
        if (!('writeHead' in answer)) {
          refuseUpgrade(answer, failure);
        } else if (answer.headersSent) {
          answer.destroy();
        } else {
          answer.writeHead(failure.status, { 'content-type': 'application/json' }).end(errorBody(failure));
        }
      });
    };
    this.proxy = createProxyMiddleware({
      router: (req) => this.upstreams.get(req),
      agent: this.upstreamAgent,
      ejectPlugins: true,
      plugins: [debugProxyErrorsPlugin, events],
    });
  }

  /** The Koa route: throws the API's errors before anything is forwarded, then hands the exchange to the proxy. */
  async web(ctx: Context): Promise<void> {
    await this.prepare(ctx.req);
    ctx.respond = false;
    const finished = new Promise((resolve) => ctx.res.once('close', resolve));
    await this.proxy(ctx.req, ctx.res);
    await finished;
  }

  /** For the HTTP server's `upgrade` event: checks the token itself, as Koa never sees the request. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    this.tunnels.add(socket);
    socket.once('close', () => this.tunnels.delete(socket));
    if (!this.options.authorized(req.headers.authorization)) {
      refuseUpgrade(socket, new HttpError(401, 'unauthorized', 'a valid bearer token is required'), { 'WWW-Authenticate': 'Bearer' });
      return;
    }
    this.prepare(req).then(
      () => this.proxy.upgrade(req, socket as never, head),
      (error: unknown) => refuseUpgrade(socket, error instanceof HttpError ? error : new HttpError(500, 'internal', 'internal error')),
    );
  }

  /** Ends open WebSocket tunnels and the idle upstream connections. */
  close(): void {
    for (const socket of this.tunnels) socket.destroy();
    this.upstreamAgent.destroy();
  }

  /** Checks the job and port, and points the request at the job's address with the agent's token removed. */
  private async prepare(req: IncomingMessage): Promise<void> {
    const forward = parseForwardUrl(req.url ?? '');
    if (!forward) throw new HttpError(404, 'not_found', `no route ${req.method} ${req.url}`);
    const job = this.options.jobs.status(forward.jobId);
    if (!job) throw new HttpError(404, 'job_not_found', `no job ${forward.jobId}`);
    if (job.state !== 'running') throw new HttpError(409, 'job_not_running', `job ${forward.jobId} is ${job.state}, not running`);
    const upstream = /^\d{1,5}$/.test(forward.port) ? await this.options.ports.upstream(job, Number(forward.port)) : undefined;
    if (!upstream) throw new HttpError(404, 'port_not_declared', `job ${forward.jobId} did not declare port ${forward.port}`);
    const host = upstream.host.includes(':') ? `[${upstream.host}]` : upstream.host;
    this.upstreams.set(req, `http://${host}:${upstream.port}`);
    delete req.headers.authorization;
    req.url = forward.upstreamPath;
  }
}
