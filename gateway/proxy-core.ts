import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { PassThrough, type Duplex } from 'node:stream';
import { createProxyMiddleware, type Plugin, type RequestHandler } from 'http-proxy-middleware';
import type { Dispatcher } from 'undici';
import type { Logger } from 'winston';
import { AGENT_FIRST_BYTE_TIMEOUT_HEADER } from '../api/agent.js';
import type { ReplicaRoute, ServiceRoute } from '../api/services.js';
import { AgentClient } from '../agent/client.js';
import { awaitFirstByte, forwardingPool, hasNoBody, HOP_BY_HOP, requestHeaders } from '../agent/http-forward.js';
import { Balancer } from './balancer.js';
import { coalesced } from './coalesce.js';
import { then, type MaybePromise } from './maybe-async.js';
import { GatewayError, refuseUpgrade, sendError, type ErrorShape } from './errors.js';
import { RateLimiter } from './rate-limit.js';
import { ReplicaTunnels, TunnelRefused, type ForwardAccess } from './replica-tunnels.js';
import type { RoutingTable } from './routing-table.js';
import type { CountedRequest, ServiceStatsRecorder } from './stats.js';

/** What the service proxy or the model endpoint decided about a request, for the core to carry out. */
export interface Exchange {
  route: ServiceRoute;
  /** Path and query the service receives. */
  path: string;
  /** The path under the service's address, without the query: what `rate_limits` prefixes match. */
  servicePath: string;
  /** The body when the gateway has read it (the model endpoint); otherwise the request's body streams through. */
  body?: Buffer;
  /** X-Forwarded-Prefix: the path the service is published under, when the service does not see it. */
  prefix?: string;
  errorShape: ErrorShape;
}

/** How long a client is told to wait after a 503 for a service with no replica: about a fast cold start. */
export const RETRY_AFTER_SECONDS = 5;

/**
 * The agent's refusals of a tunnel that say the replica is gone: it stopped or is stopping (its port no longer
 * accepts connections), or the agent no longer has it. A refused tunnel never carried the request.
 */
const REPLICA_GONE = new Map([[404, ['job_not_found', 'port_not_declared']], [409, ['job_not_running']], [502, ['upstream_refused', 'upstream_failed']]]);
/** Methods HTTP lets a proxy send again when the replica failed mid-exchange (a replica killed while answering). */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS']);

/** Whether a failed attempt may go to another replica: it never reached one, or HTTP lets it be sent again. */
function mayGoElsewhere(req: IncomingMessage, error: Error & { code?: string }): boolean {
  if (error instanceof TunnelRefused) return REPLICA_GONE.get(error.status)?.includes(error.code) ?? false;
  return error.code === 'ECONNREFUSED' || (IDEMPOTENT.has(req.method ?? '') && hasNoBody(req));
}

class FirstByteTimeout extends Error {
  constructor(ms: number) {
    super(`the service did not start its answer within ${ms} ms`);
  }
}

/** Where a replica's port forward is, worked out once per replica and routing table read. */
interface ReplicaAccess {
  /** For the WebSocket proxy: the forward's URL without a trailing slash. */
  target: string;
  /** For the WebSocket proxy: the agent's token and the service's first-byte timeout. */
  upgradeHeaders: Record<string, string>;
  /** For the tunnels that carry requests. */
  forward: ForwardAccess;
}

/** One request on its way through the core, across its attempts. */
interface Flight {
  exchange: Exchange;
  counted: CountedRequest;
  /** Replicas tried so far: a retry goes to one not tried yet. */
  tried: Set<string>;
  /** Sent again once already because a pooled connection had just been closed by the agent. */
  resent?: boolean;
  replica?: ReplicaRoute;
  access?: ReplicaAccess;
  /** The WebSocket upgrade's request to the agent. */
  proxyReq?: ClientRequest;
  /** The request's latest attempt at a replica. */
  attempt?: Attempt;
  /** Bytes of the request's body read so far (streamed requests only). */
  bodyBytes: number;
  /** The gateway has answered or given up, or the client left: late events of the exchange change nothing. */
  settled: boolean;
  clientLeft: boolean;
  res?: ServerResponse;
}

/**
 * Carries requests and WebSocket upgrades to a service's replicas through their agents' port forwards:
 * holds a request while the service has no ready replica, balances, streams both ways, enforces the
 * service's limits and timeouts, sends a request that never reached a replica to another, and counts it all.
 * Requests go out with `http.request` (agent/http-forward.ts) over pooled tunnels through the replica's agent
 * (replica-tunnels.ts), which relays their bytes; WebSocket upgrades go through http-proxy-middleware to the
 * agent's port forward, which checks and forwards each.
 */
export class ProxyCore {
  /** WebSocket upgrades on their way, for the proxy library's events. */
  private readonly flights = new WeakMap<IncomingMessage, Flight>();
  private readonly accesses = new WeakMap<ReplicaRoute, ReplicaAccess>();
  private readonly balancer = new Balancer();
  /** For WebSocket upgrades: Node keeps a pool of idle connections per agent address in one keep-alive agent. */
  private readonly upstreamAgent = forwardingPool();
  private readonly replicaTunnels = new ReplicaTunnels();
  private readonly proxy: RequestHandler;
  private readonly tunnels = new Set<Duplex>();
  private readonly limiter = new RateLimiter();
  /** `answerHeaders` as the raw name, value pairs `writeHead` takes. */
  private readonly answerHeaderPairs: string[];
  private closing = false;
  /** Tells the service controller at once that a service without replicas has a request waiting. */
  private readonly wakeScaler = coalesced(async () => {
    await this.stats.flush();
    await this.wake().catch((error: Error) => this.logger.warn(`gateway: waking the service controller failed: ${error.message}`));
  });

  /**
   * `wake` tells the service controllers that a request waits for a replica: a NOTIFY in a server, a call to it in a gateway process.
   * `answerHeaders` go on every answer, the service's and the core's own, beside any of the same name the service sent.
   */
  constructor(
    private readonly table: RoutingTable,
    private readonly stats: ServiceStatsRecorder,
    private readonly wake: () => Promise<void>,
    private readonly logger: Logger,
    private readonly answerHeaders: Record<string, string> = {},
  ) {
    const events: Plugin = (server) => {
      server.on('proxyReqWs', (proxyReq: ClientRequest, req: IncomingMessage) => this.onProxyReqWs(proxyReq, req));
      server.on('error', (error: Error, req: IncomingMessage, socket: ServerResponse | Duplex) => this.onUpgradeError(error, req, socket as Duplex));
    };
    this.proxy = createProxyMiddleware({
      pathFilter: () => true,
      router: (req) => this.flights.get(req)?.access?.target,
      agent: this.upstreamAgent,
      selfHandleResponse: true,
      ejectPlugins: true,
      plugins: [events],
    });
    this.answerHeaderPairs = Object.entries(answerHeaders).flat();
    table.afterEachRead((routes) => this.replicaTunnels.keepOnly(routes.flatMap((route) => route.replicas)));
  }

  web(req: IncomingMessage, res: ServerResponse, exchange: Exchange): MaybePromise<void> {
    const flight = this.begin(exchange);
    flight.res = res;
    res.once('close', () => {
      if (!res.writableFinished) {
        flight.clientLeft = true;
        flight.settled = true;
        flight.attempt?.abort(new Error('the client left'));
      }
      this.end(flight);
    });
    const refusal = this.refusal(exchange, req);
    if (refusal) return this.fail(flight, res, refusal);
    const size = exchange.body?.length ?? Number(req.headers['content-length'] ?? 0);
    if (size > exchange.route.maxBodyBytes) return this.fail(flight, res, tooLarge(exchange.route));
    return then(this.readyRoute(exchange.route, () => res.destroyed), (route) => {
      if (res.destroyed) return;
      if (!route) return this.fail(flight, res, noReplica(exchange.route));
      exchange.route = route;
      prepareHeaders(req, exchange);
      if (!exchange.body && !hasNoBody(req)) this.limitBody(req, flight);
      this.launch(req, res, flight);
    });
  }

  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, exchange: Exchange): Promise<void> {
    const flight = this.begin(exchange);
    this.flights.set(req, flight);
    socket.once('close', () => this.end(flight));
    const refusal = this.refusal(exchange, req);
    if (refusal) {
      flight.counted.answered(refusal.status);
      return refuseUpgrade(socket, refusal);
    }
    const route = await this.readyRoute(exchange.route, () => socket.destroyed);
    if (socket.destroyed) return;
    if (!route) {
      flight.counted.answered(503);
      return refuseUpgrade(socket, noReplica(exchange.route));
    }
    exchange.route = route;
    prepareHeaders(req, exchange);
    if (!this.aim(flight)) {
      flight.counted.answered(503);
      return refuseUpgrade(socket, noReplica(route));
    }
    Object.assign(req.headers, flight.access!.upgradeHeaders);
    this.proxy.upgrade(req, socket as Socket, head);
  }

  /** An upgrade's connection is the gateway's to end: the HTTP server no longer tracks it once it is handed over. */
  track(socket: Duplex): void {
    this.tunnels.add(socket);
    socket.once('close', () => this.tunnels.delete(socket));
  }

  /** The rate limit's 429, when the request is over it. */
  private refusal(exchange: Exchange, req: IncomingMessage): GatewayError | undefined {
    try {
      this.limiter.admit(exchange.route, exchange.servicePath, req);
      return undefined;
    } catch (error) {
      if (error instanceof GatewayError) return error;
      throw error;
    }
  }

  private begin(exchange: Exchange): Flight {
    return { exchange, counted: this.stats.begin(exchange.route.runId), tried: new Set(), bodyBytes: 0, settled: false, clientLeft: false };
  }

  private end(flight: Flight): void {
    flight.counted.end();
    if (flight.replica) this.balancer.release(flight.replica);
    flight.replica = undefined;
  }

  close(): void {
    this.closing = true;
    for (const socket of this.tunnels) socket.destroy();
    this.upstreamAgent.destroy();
    this.replicaTunnels.close();
  }

  /**
   * The route once it has a ready replica not in `tried`: at once, or after holding the request up to the service's
   * hold time while the routing table is read again.
   */
  private readyRoute(route: ServiceRoute, gone: () => boolean, tried: ReadonlySet<string> = NONE_TRIED): MaybePromise<ServiceRoute | undefined> {
    const current = this.table.serviceById(route.runId) ?? route;
    return usable(current, tried) ? current : this.awaitReadyRoute(route, gone, tried);
  }

  private async awaitReadyRoute(route: ServiceRoute, gone: () => boolean, tried: ReadonlySet<string>): Promise<ServiceRoute | undefined> {
    void this.wakeScaler();
    const deadline = Date.now() + route.holdMs;
    while (Date.now() < deadline && !gone() && !this.closing) {
      await this.table.nextRead(deadline - Date.now());
      const current = this.table.serviceById(route.runId);
      if (!current) return undefined;
      if (usable(current, tried)) return current;
    }
    return undefined;
  }

  /** Picks the next replica for the flight; false when none is left to try. */
  private aim(flight: Flight): boolean {
    const { route } = flight.exchange;
    if (flight.replica) this.balancer.release(flight.replica);
    const replica = this.balancer.acquire(route.runId, route.replicas, flight.tried);
    flight.replica = replica;
    if (!replica) return false;
    flight.tried.add(replica.id);
    flight.access = this.accessOf(replica, route);
    return true;
  }

  private accessOf(replica: ReplicaRoute, route: ServiceRoute): ReplicaAccess {
    let access = this.accesses.get(replica);
    if (!access) {
      const { url, headers } = new AgentClient(replica.agentUrl, replica.agentToken).portAccess(replica.id, replica.port, '');
      const parsed = new URL(url);
      access = {
        target: url.replace(/\/$/, ''),
        upgradeHeaders: { ...headers, [AGENT_FIRST_BYTE_TIMEOUT_HEADER]: String(route.firstByteTimeoutMs) },
        forward: {
          host: parsed.hostname.replace(/^\[(.*)\]$/, '$1'),
          port: Number(parsed.port || 80),
          basePath: parsed.pathname.replace(/\/$/, ''),
          headers,
        },
      };
      this.accesses.set(replica, access);
    }
    return access;
  }

  private launch(req: IncomingMessage, res: ServerResponse, flight: Flight): void {
    if (!this.aim(flight)) return void this.awaitAnotherReplica(req, res, flight);
    const { forward } = flight.access!;
    const { exchange } = flight;
    const attempt = new Attempt(this, req, res, flight);
    flight.attempt = attempt;
    // The request goes to the replica itself, over a tunnel: the agent's token is the tunnel's, never the request's.
    const headers = requestHeaders(req.headers, UNDICI_FRAMES);
    if (req.headers.host === undefined) headers.push('host', `${forward.host.includes(':') ? `[${forward.host}]` : forward.host}:${forward.port}`);
    this.replicaTunnels.poolOf(flight.replica!, () => forward).dispatch({
      path: req.url ?? '/', method: req.method ?? 'GET', headers,
      body: exchange.body ?? (hasNoBody(req) ? null : attempt.streamedBody()),
      headersTimeout: exchange.route.firstByteTimeoutMs, bodyTimeout: exchange.route.idleTimeoutMs,
    }, attempt);
  }

  /**
   * Every replica the request was sent to had gone before it got there, and the gateway's copy of the table
   * may be older than what the controllers know (a replica just became ready, a dead one is not yet out):
   * like a request to a service with no replica, it waits for the table to show one it has not tried.
   */
  private async awaitAnotherReplica(req: IncomingMessage, res: ServerResponse, flight: Flight): Promise<void> {
    const route = await this.readyRoute(flight.exchange.route, () => res.destroyed, flight.tried);
    if (res.destroyed) return;
    if (!route) return this.fail(flight, res, new GatewayError(502, 'replica_gone', 'the service\'s replicas went away before answering; try again'));
    flight.exchange.route = route;
    this.launch(req, res, flight);
  }

  /** Counts a streamed body as it passes, over all attempts, and stops one that grows past the service's limit. */
  private limitBody(req: IncomingMessage, flight: Flight): void {
    req.on('data', (chunk: Buffer) => {
      flight.bodyBytes += chunk.length;
      if (flight.bodyBytes > flight.exchange.route.maxBodyBytes && !flight.settled) {
        req.unpipe();
        if (flight.res) this.fail(flight, flight.res, tooLarge(flight.exchange.route));
        flight.attempt?.abort(new Error('the body is over the limit'));
      }
    });
  }

  private onProxyReqWs(proxyReq: ClientRequest, req: IncomingMessage): void {
    const flight = this.flights.get(req);
    if (!flight) return;
    flight.proxyReq = proxyReq;
    proxyReq.once('upgrade', () => flight.counted.answered(101));
    proxyReq.once('response', (answer: IncomingMessage) => flight.counted.answered(answer.statusCode ?? 502));
    const timeoutMs = flight.exchange.route.firstByteTimeoutMs;
    awaitFirstByte(proxyReq, timeoutMs, () => new FirstByteTimeout(timeoutMs));
  }

  /** The replica's answer began: false when nobody waits for it any more. */
  answerBegins(res: ServerResponse, flight: Flight, status: number, statusText: string, rawHeaders: Buffer[]): boolean {
    if (flight.settled || res.destroyed) return false;
    flight.settled = true;
    flight.counted.answered(status);
    // Raw pairs, so that a header the service sent twice (Set-Cookie, its own CSP beside ours) goes out twice.
    res.writeHead(status, statusText, answerHeaders(rawHeaders, this.answerHeaderPairs));
    return true;
  }

  /**
   * A request that never reached a replica goes to another one, each at most once (so it ends), while its body
   * can still be sent whole.
   */
  private mayRetry(flight: Flight): boolean {
    return !this.closing && (flight.exchange.body !== undefined || flight.bodyBytes === 0);
  }

  /** The attempt failed before its answer began. */
  attemptFailed(error: Error & { code?: string }, req: IncomingMessage, res: ServerResponse, flight: Flight, attempt: Attempt): void {
    if (flight.settled || flight.attempt !== attempt) return;
    attempt.detach();
    if (error.code === 'UND_ERR_HEADERS_TIMEOUT') return this.fail(flight, res, upstreamFailure(new FirstByteTimeout(flight.exchange.route.firstByteTimeoutMs)));
    if (staleTunnel(error, flight.exchange.body !== undefined || hasNoBody(req)) && !flight.resent && flight.replica) {
      flight.resent = true;
      flight.tried.delete(flight.replica.id);
      return this.launch(req, res, flight);
    }
    if (mayGoElsewhere(req, error)) {
      if (this.mayRetry(flight)) return this.launch(req, res, flight);
      if (error instanceof TunnelRefused) return this.fail(flight, res, new GatewayError(502, 'replica_gone', 'the replica went away while the request was on its way; try again'));
    }
    this.fail(flight, res, upstreamFailure(error));
  }

  /** The answer broke off after it began (the replica failed, or stayed silent past the idle timeout), or the client left. */
  answerFailed(res: ServerResponse, flight: Flight): void {
    // A client that left was noted when its response closed, before the service's answer was cut: not the service's failure.
    if (!flight.clientLeft) flight.counted.failed();
    res.destroy();
  }

  private onUpgradeError(error: Error, req: IncomingMessage, socket: Duplex): void {
    const flight = this.flights.get(req);
    if (!flight || flight.settled) return;
    const failure = upstreamFailure(error);
    flight.settled = true;
    flight.counted.answered(failure.status);
    refuseUpgrade(socket, failure);
  }

  private fail(flight: Flight, res: ServerResponse, error: GatewayError): void {
    if (flight.settled) return;
    flight.settled = true;
    if (res.headersSent) flight.counted.failed();
    else flight.counted.answered(error.status);
    if (res.destroyed) return;
    sendError(res, error, flight.exchange.errorShape, this.answerHeaders);
  }
}

const NONE_TRIED: ReadonlySet<string> = new Set();

/** Whether the route has a ready replica not in `tried`. */
function usable(route: ServiceRoute, tried: ReadonlySet<string>): boolean {
  return route.replicas.some((replica) => !tried.has(replica.id));
}

function tooLarge(route: ServiceRoute): GatewayError {
  return new GatewayError(413, 'payload_too_large', `the body is larger than the service's limit of ${route.maxBodyBytes} bytes`);
}

function noReplica(route: ServiceRoute): GatewayError {
  return new GatewayError(503, 'no_replica',
    `service ${route.run} has no ready replica and none became ready within ${route.holdMs / 1000} s`, { 'Retry-After': String(RETRY_AFTER_SECONDS) });
}

function upstreamFailure(error: Error & { code?: string }): GatewayError {
  if (error instanceof FirstByteTimeout) return new GatewayError(504, 'upstream_timeout', error.message);
  if (error instanceof TunnelRefused) return new GatewayError(502, 'upstream_failed', `the replica's agent refused the connection: ${error.code}: ${error.message}`);
  return new GatewayError(502, 'upstream_failed', `the connection to the service's replica failed: ${error.code ?? error.message}`);
}

/** The request as the replica's agent gets it: its path under the service, and where it came from. */
function prepareHeaders(req: IncomingMessage, exchange: Exchange): void {
  const client = req.socket.remoteAddress ?? '';
  const before = req.headers['x-forwarded-for'];
  req.headers['x-forwarded-for'] = before ? `${before}, ${client}` : client;
  req.headers['x-forwarded-proto'] = (req.socket as { encrypted?: boolean }).encrypted ? 'https' : 'http';
  req.headers['x-forwarded-host'] = req.headers.host ?? '';
  if (exchange.prefix) req.headers['x-forwarded-prefix'] = exchange.prefix;
  else delete req.headers['x-forwarded-prefix'];
  req.url = exchange.path;
}

/** Headers undici frames or refuses itself: it frames a streamed body on its own, and Node's server already answered any `Expect`. */
const UNDICI_FRAMES = ['transfer-encoding', 'expect'];

/**
 * Whether a failed attempt may be sent again as it was to the same replica: its tunnel broke before the answer
 * began (the far end closed a pooled tunnel just as it was reused), and the request has no body that is already gone.
 */
function staleTunnel(error: Error & { code?: string }, bodyless: boolean): boolean {
  return (error.code === 'UND_ERR_SOCKET' || error.code === 'ECONNRESET') && bodyless;
}

/**
 * An answer's raw headers, as undici gives them, less those that describe the connection it came on (Node frames the
 * answer again), followed by the gateway's own pairs.
 */
function answerHeaders(rawHeaders: Buffer[], own: readonly string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toString('latin1');
    if (!HOP_BY_HOP.has(name.toLowerCase())) kept.push(name, rawHeaders[i + 1]!.toString('latin1'));
  }
  for (const item of own) kept.push(item);
  return kept;
}

/**
 * One attempt of a request at a replica, as undici's dispatch handler: relays the answer to the client as it comes,
 * pausing while the client is slower, and hands failures to the core.
 */
class Attempt implements Dispatcher.DispatchHandler {
  private aborter?: (error: Error) => void;
  private aborted?: Error;
  private resume?: () => void;
  private body?: PassThrough;
  private bodyBegan = false;

  constructor(private readonly core: ProxyCore, private readonly req: IncomingMessage, private readonly res: ServerResponse, private readonly flight: Flight) {}

  /** The request's body for this attempt: a stream of its own, so that undici ending it on a failure leaves the client's request whole. */
  streamedBody(): PassThrough {
    this.body = this.req.pipe(new PassThrough());
    return this.body;
  }

  /** Stops the attempt's body from taking any more of the request. */
  detach(): void {
    if (this.body) this.req.unpipe(this.body);
  }

  abort(error: Error): void {
    this.detach();
    if (this.aborter) this.aborter(error);
    else this.aborted = error;
  }

  onConnect(abort: (error?: Error) => void): void {
    this.aborter = abort;
    if (this.aborted) abort(this.aborted);
  }

  onHeaders(status: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
    if (!this.core.answerBegins(this.res, this.flight, status, statusText, rawHeaders)) {
      this.abort(new Error('nobody waits for the answer'));
      return false;
    }
    this.resume = resume;
    this.res.on('drain', resume);
    // After the rest of what the tunnel's read brought (a small answer's body, an event stream's first event) has been
    // relayed: a small answer goes out in one write, and one whose body starts quiet is still seen as answered.
    queueMicrotask(this.flushQuietHead);
    return true;
  }

  private readonly flushQuietHead = (): void => {
    if (!this.bodyBegan && !this.res.writableEnded && !this.res.destroyed) this.res.flushHeaders();
  };

  onData(chunk: Buffer): boolean {
    this.bodyBegan = true;
    return this.res.write(chunk);
  }

  onComplete(): void {
    if (!this.res.destroyed) this.res.end();
  }

  onError(error: Error): void {
    if (this.resume) this.core.answerFailed(this.res, this.flight);
    else this.core.attemptFailed(error, this.req, this.res, this.flight, this);
  }
}
