import type Docker from 'dockerode';
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { createProxyMiddleware, debugProxyErrorsPlugin, type Plugin, type RequestHandler } from 'http-proxy-middleware';
import type { Logger } from 'winston';
import { AGENT_FIRST_BYTE_TIMEOUT_HEADER, AGENT_FORWARD_AUTH_HEADER, AGENT_TUNNEL_PROTOCOL, MAX_FIRST_BYTE_TIMEOUT_MS, type JobStatus, type JobSubmission } from '../api/agent.js';
import { LABELS } from './docker-runtime.js';
import { HostPortClaims } from './host-port-claims.js';
import { HttpError, type ErrorBody } from './http-errors.js';
import { awaitFirstByte, flushHeadIfQuiet, forwardingPool, hasNoBody, passBody, requestHeaders, responseHeaders, sendOn, staleConnection } from './http-forward.js';
import type { JobManager } from './jobs.js';

/** How long a job may take, once the request reached it whole, to start its answer. */
export const DEFAULT_FIRST_BYTE_TIMEOUT_MS = 60_000;

export interface Upstream {
  host: string;
  port: number;
}

/** Where a running job's declared ports are reached on this machine. */
export interface JobPorts {
  /**
   * Records a new job's ports. Returns the submission to start: with a `servicePort`, `PORT` in its
   * environment says where the service must listen, and the service port is among its ports.
   */
  submitted(submission: JobSubmission): Promise<JobSubmission>;
  /** Forgets a removed job's ports; a service port it claimed is free for the next job once this resolves. */
  removed(jobId: string): Promise<void>;
  /** Undefined when the job did not declare `port`. */
  upstream(job: JobStatus, port: number): Promise<Upstream | undefined>;
}

function listeningOn(submission: JobSubmission, servicePort: number, port: number): JobSubmission {
  return {
    ...submission,
    env: { ...submission.env, PORT: String(port) },
    ports: [...new Set([...submission.ports, servicePort])],
  };
}

/** Listens on `port` (0: any free one) and closes at once: the port it got, or undefined when it could not. */
function bindBriefly(port: number, host?: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const server = createNetServer();
    server.once('error', () => resolve(undefined));
    server.listen({ port, host, exclusive: true }, () => {
      const bound = (server.address() as AddressInfo).port;
      server.close(() => resolve(bound));
    });
  });
}

/** Whether nothing listens on `port`, on loopback or on every address (no host: the wildcard). */
async function portFree(port: number): Promise<boolean> {
  return await bindBriefly(port, '127.0.0.1') !== undefined && await bindBriefly(port) !== undefined;
}

/**
 * Process jobs listen on this machine's loopback, on the port they declared. They share the machine's
 * network, where several replicas of one service may run, under this agent or another on the machine: a
 * service listens on its `servicePort` while that is free and unclaimed, else on any free port, and
 * `ports/<servicePort>` leads to wherever it listens.
 */
export class ProcessJobPorts implements JobPorts {
  private readonly declared = new Map<string, ReadonlySet<number>>();
  private readonly services = new Map<string, { servicePort: number; port: number }>();
  /** Service ports are chosen one job at a time, so that two jobs never get the same. */
  private choices: Promise<unknown> = Promise.resolve();

  constructor(private readonly logger: Logger, private readonly claims = new HostPortClaims()) {}

  async submitted(submission: JobSubmission): Promise<JobSubmission> {
    const { jobId, servicePort } = submission;
    this.declared.set(jobId, new Set(submission.ports));
    if (servicePort === undefined) return submission;
    const chosen = this.choices.then(() => this.servicePortOf(jobId, servicePort));
    this.choices = chosen.catch(() => undefined);
    return listeningOn(submission, servicePort, await chosen);
  }

  async removed(jobId: string): Promise<void> {
    const service = this.services.get(jobId);
    this.declared.delete(jobId);
    this.services.delete(jobId);
    if (service) await this.claims.release(service.port, jobId);
  }

  async upstream(job: JobStatus, port: number): Promise<Upstream | undefined> {
    const service = this.services.get(job.jobId);
    if (service?.servicePort === port) return { host: '127.0.0.1', port: service.port };
    return this.declared.get(job.jobId)?.has(port) ? { host: '127.0.0.1', port } : undefined;
  }

  private async servicePortOf(jobId: string, servicePort: number): Promise<number> {
    const known = this.services.get(jobId);
    if (known) return known.port;
    const port = !this.heldByAnother(jobId, servicePort) && await this.claimFree(servicePort, jobId) ? servicePort : await this.freePort(jobId);
    this.services.set(jobId, { servicePort, port });
    this.logger.info('service port chosen', { jobId, servicePort, port });
    return port;
  }

  private async freePort(jobId: string): Promise<number> {
    for (;;) {
      const port = await bindBriefly(0);
      if (port === undefined) throw new Error('no free port to listen on');
      if (!this.heldByAnother(jobId, port) && await this.claims.claim(port, jobId)) return port;
    }
  }

  /** Claims `port` for the job when no agent on this machine has, and keeps the claim only if nothing listens there. */
  private async claimFree(port: number, jobId: string): Promise<boolean> {
    if (!(await this.claims.claim(port, jobId))) return false;
    if (await portFree(port)) return true;
    await this.claims.release(port, jobId);
    return false;
  }

  private heldByAnother(jobId: string, port: number): boolean {
    for (const [other, ports] of this.declared) if (other !== jobId && ports.has(port)) return true;
    for (const [other, service] of this.services) if (other !== jobId && service.port === port) return true;
    return false;
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

  async submitted(submission: JobSubmission): Promise<JobSubmission> {
    const { servicePort } = submission;
    return servicePort === undefined ? submission : listeningOn(submission, servicePort, servicePort);
  }

  async removed(jobId: string): Promise<void> {
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

/**
 * The header that holds the agent's token: the agent's own header when the request has one, else Authorization. A port
 * forward leaves Authorization to the job that way; a request through Kubernetes' pod proxy has to, as the API server
 * takes Authorization for its own credentials.
 */
function credentialHeader(req: IncomingMessage): string {
  return req.headers[AGENT_FORWARD_AUTH_HEADER] !== undefined ? AGENT_FORWARD_AUTH_HEADER : 'authorization';
}

/** The agent's token as a request carries it (`Bearer <token>`). */
export function agentCredential(req: IncomingMessage): string | undefined {
  const value = req.headers[credentialHeader(req)];
  return Array.isArray(value) ? value.join(', ') : value;
}

class UpstreamTimeout extends Error {
  constructor(ms: number) {
    super(`the job did not answer within ${ms} ms`);
    this.name = 'UpstreamTimeout';
  }
}

/** A connection that failed while it was being made never carried the request: the caller may send it elsewhere. */
function upstreamFailure(error: Error & { code?: string; syscall?: string }): HttpError {
  if (error instanceof UpstreamTimeout) return new HttpError(504, 'upstream_timeout', error.message);
  if (error.code === 'ECONNREFUSED' || error.syscall === 'connect') return new HttpError(502, 'upstream_refused', `nothing listens on the job's port (${error.code})`);
  return new HttpError(502, 'upstream_failed', `the connection to the job's port failed: ${error.message}`);
}

function errorBody(error: HttpError): string {
  const body: ErrorBody = { error: { code: error.code, message: error.message } };
  return JSON.stringify(body);
}

/** Answers a request that will not be forwarded, in the API's error shape. */
function sendError(res: ServerResponse, error: HttpError, headers: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = errorBody(error);
  res.writeHead(error.status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
}

/**
 * Connects an upgraded connection to the job's port and relays bytes both ways until either side ends; a port
 * that refuses the connection is answered with the API's error instead of the switch.
 */
function relay(socket: Duplex, upstream: Upstream, head: Buffer): void {
  const job = connect({ host: upstream.host, port: upstream.port, noDelay: true });
  job.once('error', (error) => refuseUpgrade(socket, upstreamFailure(error)));
  job.once('connect', () => {
    job.removeAllListeners('error');
    if (!socket.writable) return void job.destroy();
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${AGENT_TUNNEL_PROTOCOL}\r\n\r\n`);
    if (head.length > 0) job.write(head);
    (socket as { setNoDelay?: (noDelay: boolean) => void }).setNoDelay?.(true);
    job.pipe(socket).pipe(job);
    job.once('error', () => socket.destroy());
    job.once('close', () => socket.destroy());
    socket.once('close', () => job.destroy());
  });
}

/** Answers an upgrade request that will not be forwarded, on its raw socket. */
export function refuseUpgrade(socket: Duplex, error: HttpError, headers: Record<string, string> = {}): void {
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
  /** Whether a request carries the agent's token: forwards never pass Koa's middleware. */
  authorized(credential: string | undefined): boolean;
  /** Called for every forward that carries the agent's token: a server still uses this agent. */
  contact(): void;
  firstByteTimeoutMs: number;
  logger: Logger;
}

const UNAUTHORIZED = new HttpError(401, 'unauthorized', 'a valid bearer token is required');

/** Where a checked forward goes. */
interface Target {
  upstream: Upstream;
  path: string;
  /** The agent's own headers, which the job never sees. */
  removedHeaders: string[];
  firstByteTimeoutMs: number;
}

/**
 * Forwards requests and WebSocket upgrades to a running job's declared port, streaming both ways.
 * The request's path picks the job and the port; the address is always the job's own.
 */
export class PortForward {
  /** Where each WebSocket upgrade goes, for the proxy library that carries them. */
  private readonly upgrades = new WeakMap<IncomingMessage, { target: string; firstByteTimeoutMs: number }>();
  private readonly proxy: RequestHandler;
  private readonly upstreamAgent = forwardingPool();
  /** Upgraded connections: the HTTP server no longer closes them itself. */
  private readonly tunnels = new Set<Duplex>();
  private readonly inFlight = new Map<string, number>();

  constructor(private readonly options: PortForwardOptions) {
    const events: Plugin = (server) => {
      server.on('proxyReqWs', (proxyReq: ClientRequest, req: IncomingMessage) => {
        const timeoutMs = this.upgrades.get(req)?.firstByteTimeoutMs ?? options.firstByteTimeoutMs;
        awaitFirstByte(proxyReq, timeoutMs, () => new UpstreamTimeout(timeoutMs));
      });
      server.on('error', (error: Error, _req: IncomingMessage, socket: ServerResponse | Duplex) => refuseUpgrade(socket as Duplex, upstreamFailure(error)));
    };
    this.proxy = createProxyMiddleware({
      router: (req) => this.upgrades.get(req)?.target,
      agent: this.upstreamAgent,
      ejectPlugins: true,
      plugins: [debugProxyErrorsPlugin, events],
    });
  }

  /** Whether the HTTP server should hand a request to `web` rather than to Koa. */
  static handles(url: string | undefined): boolean {
    return FORWARD_URL.test(url ?? '');
  }

  /**
   * For the HTTP server's `request` event, before Koa, which would cost more than the forward itself: checks
   * the token, the job and the port, and answers with the API's errors before anything is forwarded.
   */
  web(req: IncomingMessage, res: ServerResponse): void {
    if (!this.options.authorized(agentCredential(req))) return sendError(res, UNAUTHORIZED, { 'WWW-Authenticate': 'Bearer' });
    this.options.contact();
    this.prepare(req, res).then(
      (target) => this.forward(req, res, target),
      (error: unknown) => sendError(res, this.known(req, error)),
    );
  }

  private forward(req: IncomingMessage, res: ServerResponse, target: Target, resent = false): void {
    const { upstream, path, removedHeaders, firstByteTimeoutMs } = target;
    const proxyReq = sendOn(req, {
      host: upstream.host, port: upstream.port, path, headers: requestHeaders(req.headers, removedHeaders), agent: this.upstreamAgent,
      firstByteTimeoutMs, timeoutError: () => new UpstreamTimeout(firstByteTimeoutMs),
    });
    res.once('close', () => { if (!res.writableFinished) proxyReq.destroy(); });
    proxyReq.on('error', (error) => {
      req.unpipe(proxyReq);
      if (!resent && !res.headersSent && staleConnection(proxyReq, error, hasNoBody(req))) return this.forward(req, res, target, true);
      sendError(res, upstreamFailure(error));
    });
    proxyReq.once('response', (proxyRes) => {
      res.writeHead(proxyRes.statusCode ?? 502, proxyRes.statusMessage, responseHeaders(proxyRes.rawHeaders));
      flushHeadIfQuiet(proxyRes, res);
      passBody(proxyRes, res);
    });
  }

  /** For the HTTP server's `upgrade` event: checks the token itself, as Koa never sees the request. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    this.tunnels.add(socket);
    socket.once('close', () => this.tunnels.delete(socket));
    if (!this.options.authorized(agentCredential(req))) {
      refuseUpgrade(socket, UNAUTHORIZED, { 'WWW-Authenticate': 'Bearer' });
      return;
    }
    this.options.contact();
    const tunnel = req.headers.upgrade?.toLowerCase() === AGENT_TUNNEL_PROTOCOL;
    this.prepare(req, socket).then(
      ({ upstream, path, removedHeaders, firstByteTimeoutMs }) => {
        if (tunnel) return relay(socket, upstream, head);
        const host = upstream.host.includes(':') ? `[${upstream.host}]` : upstream.host;
        this.upgrades.set(req, { target: `http://${host}:${upstream.port}`, firstByteTimeoutMs });
        for (const name of removedHeaders) delete req.headers[name];
        req.url = path;
        this.proxy.upgrade(req, socket as never, head);
      },
      (error: unknown) => refuseUpgrade(socket, this.known(req, error)),
    );
  }

  private known(req: IncomingMessage, error: unknown): HttpError {
    if (error instanceof HttpError) return error;
    this.options.logger.error('request failed', { method: req.method, path: req.url, error: (error as Error).stack ?? String(error) });
    return new HttpError(500, 'internal', 'internal error');
  }

  /** Ends open WebSocket tunnels and the idle upstream connections. */
  close(): void {
    for (const socket of this.tunnels) socket.destroy();
    this.upstreamAgent.destroy();
  }

  /** Forwarded HTTP exchanges not yet finished and WebSocket tunnels open, of one job. */
  forwarding(jobId: string): number {
    return this.inFlight.get(jobId) ?? 0;
  }

  /**
   * Checks the job and port, counts the exchange until `connection` closes, and says where the request goes,
   * with the agent's token and its own headers removed.
   */
  private async prepare(req: IncomingMessage, connection: ServerResponse | Duplex): Promise<Target> {
    const forward = parseForwardUrl(req.url ?? '');
    if (!forward) throw new HttpError(404, 'not_found', `no route ${req.method} ${req.url}`);
    const job = this.options.jobs.status(forward.jobId);
    if (!job) throw new HttpError(404, 'job_not_found', `no job ${forward.jobId}`);
    if (job.state !== 'running') throw new HttpError(409, 'job_not_running', `job ${forward.jobId} is ${job.state}, not running`);
    this.countUntilClosed(job.jobId, connection);
    const upstream = /^\d{1,5}$/.test(forward.port) ? await this.options.ports.upstream(job, Number(forward.port)) : undefined;
    if (!upstream) throw new HttpError(404, 'port_not_declared', `job ${forward.jobId} did not declare port ${forward.port}`);
    const asked = req.headers[AGENT_FIRST_BYTE_TIMEOUT_HEADER];
    const firstByteTimeoutMs = typeof asked === 'string' && /^\d{1,7}$/.test(asked) && Number(asked) > 0
      ? Math.min(Number(asked), MAX_FIRST_BYTE_TIMEOUT_MS)
      : this.options.firstByteTimeoutMs;
    return { upstream, path: forward.upstreamPath, removedHeaders: [credentialHeader(req), AGENT_FIRST_BYTE_TIMEOUT_HEADER], firstByteTimeoutMs };
  }

  private countUntilClosed(jobId: string, connection: ServerResponse | Duplex): void {
    this.inFlight.set(jobId, this.forwarding(jobId) + 1);
    connection.once('close', () => {
      const left = this.forwarding(jobId) - 1;
      if (left === 0) this.inFlight.delete(jobId);
      else this.inFlight.set(jobId, left);
    });
  }
}
