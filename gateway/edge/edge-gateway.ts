import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from 'winston';
import { KEEP_ALIVE_SERVER_OPTIONS } from '../../api/keep-alive.js';
import { GatewayError, refuseUpgrade, sendError } from '../errors.js';
import { hostExchange, hostRoute, isModelsHost, type HostDomain } from '../host-routing.js';
import { gatewayModelCall, modelRequest, sendModelList } from '../model-endpoint.js';
import { ProxyCore } from '../proxy-core.js';
import { RoutingTable } from '../routing-table.js';
import { ServiceStatsRecorder } from '../stats.js';
import { Certificates } from './certificates.js';
import { ConfigSync } from './config-sync.js';
import { ServerApi } from './server-api.js';

const ACME_CHALLENGE_PREFIX = '/.well-known/acme-challenge/';

export interface EdgeGatewayOptions {
  serverUrl: string;
  token: string;
  host: string;
  httpPort: number;
  httpsPort: number;
  logger: Logger;
  /** The server no longer knows this gateway (deleted, or another process started in its place). */
  onRevoked: (reason: string) => void;
}

/**
 * The gateway process: publishes its project's services at `<run>.<domain>` over HTTP and HTTPS (SNI, one
 * certificate per service), and their models at `gateway.<domain>`, with the proxy core, authentication, rate limits and statistics of the in-server
 * gateway. Routes, callers and certificates come from the server (`ConfigSync`); request counts go back to it.
 */
export class EdgeGateway {
  private readonly api: ServerApi;
  private readonly sync: ConfigSync;
  private readonly table: RoutingTable;
  private readonly stats: ServiceStatsRecorder;
  private readonly core: ProxyCore;
  readonly certificates: Certificates;
  private readonly http: Server;
  private readonly https: Server;

  constructor(private readonly options: EdgeGatewayOptions) {
    const { logger } = options;
    this.api = new ServerApi(options.serverUrl, options.token);
    this.sync = new ConfigSync(this.api, logger, options.onRevoked);
    this.table = new RoutingTable(this.sync, logger);
    this.stats = new ServiceStatsRecorder((seconds) => this.api.reportStats(seconds), logger);
    this.core = new ProxyCore(this.table, this.stats, () => this.api.wake(), logger);
    this.certificates = new Certificates(this.api, logger);
    this.http = createHttpServer(KEEP_ALIVE_SERVER_OPTIONS, (req, res) => void this.plain(req, res));
    this.https = createHttpsServer({
      ...KEEP_ALIVE_SERVER_OPTIONS,
      SNICallback: (servername, done) => {
        const context = this.certificates.contextFor(servername);
        if (context) done(null, context);
        else done(new Error(`no certificate for ${servername}`));
      },
    }, (req, res) => void this.web(req, res));
    for (const server of [this.http, this.https]) server.on('upgrade', (req, socket, head) => void this.upgrade(req, socket, head));
  }

  /** Listens, then waits for the server's first answer; returns the ports it listens on. */
  async start(): Promise<{ http: number; https: number }> {
    const listen = (server: Server, port: number) => new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, this.options.host, () => resolve((server.address() as AddressInfo).port));
    });
    const ports = { http: await listen(this.http, this.options.httpPort), https: await listen(this.https, this.options.httpsPort) };
    this.sync.onChange(() => this.certificates.update(this.sync.config!));
    await this.table.start();
    this.stats.start();
    await this.sync.start();
    return ports;
  }

  async close(): Promise<void> {
    this.sync.stop();
    this.core.close();
    for (const server of [this.http, this.https]) {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
    await this.table.stop();
    await this.stats.stop().catch(() => {});
    await this.certificates.settle();
  }

  private domain(): HostDomain | null {
    const config = this.sync.config;
    return config && { project: config.gateway.project, base: config.gateway.base, publishes: () => true };
  }

  /**
   * Port 80: ACME's HTTP-01 challenges, a redirect to HTTPS for a service (or the model endpoint) with a certificate
   * (and `https` not false), the service itself otherwise, and `/health` for any other host.
   */
  private async plain(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    if (url.startsWith(ACME_CHALLENGE_PREFIX)) return this.challenge(url.slice(ACME_CHALLENGE_PREFIX.length), res);
    const domain = this.domain();
    const route = domain ? hostRoute(this.table, domain, req.headers.host) : undefined;
    const models = domain !== null && isModelsHost(domain, req.headers.host);
    if (!route && !models && url === '/health') return this.health(res);
    const hostname = (req.headers.host ?? '').replace(/:\d+$/, '').toLowerCase();
    if (((route && route.https !== false) || models) && this.certificates.has(hostname)) {
      const port = this.sync.config!.gateway.httpsPort;
      res.writeHead(308, { location: `https://${hostname}${port === 443 ? '' : `:${port}`}${url}`, 'content-length': 0 });
      res.end();
      return;
    }
    return this.web(req, res);
  }

  /** `<run>.<domain>`: that service; `gateway.<domain>`: the OpenAI-compatible endpoint of the models published here. */
  private async web(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const domain = this.domain();
    const models = domain !== null && isModelsHost(domain, req.headers.host);
    try {
      if (!models) return await this.core.web(req, res, await hostExchange(this.sync, this.table, this.requireDomain(), req));
      const request = await modelRequest(this.sync, this.table, gatewayModelCall(domain.project, req), req);
      if (request.kind === 'list') return sendModelList(res, request.body);
      await this.core.web(req, res, request.exchange);
    } catch (error) {
      sendError(res, this.known(req, error), models ? 'openai' : 'api');
    }
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    this.core.track(socket);
    socket.on('error', () => socket.destroy());
    try {
      await this.core.upgrade(req, socket, head, await hostExchange(this.sync, this.table, this.requireDomain(), req));
    } catch (error) {
      refuseUpgrade(socket, this.known(req, error));
    }
  }

  private requireDomain(): HostDomain {
    const domain = this.domain();
    if (!domain) throw new GatewayError(503, 'not_configured', 'the gateway has not heard from its server yet', { 'Retry-After': '1' });
    return domain;
  }

  private challenge(token: string, res: ServerResponse): void {
    const keyAuthorization = this.certificates.challenges.get(token);
    if (keyAuthorization === undefined) return sendError(res, new GatewayError(404, 'not_found', 'no such ACME challenge'), 'api');
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': Buffer.byteLength(keyAuthorization) });
    res.end(keyAuthorization);
  }

  private health(res: ServerResponse): void {
    const config = this.sync.config;
    const body = JSON.stringify({ status: config ? 'ok' : 'waiting for the server', gateway: config?.gateway.name ?? null, services: this.table.routes().length });
    res.writeHead(config ? 200 : 503, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  }

  private known(req: IncomingMessage, error: unknown): GatewayError {
    if (error instanceof GatewayError) return error;
    this.options.logger.error(`gateway: ${req.method} ${req.headers.host}${req.url}: ${(error as Error).stack ?? error}`);
    return new GatewayError(500, 'internal', 'internal server error');
  }
}
