import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'winston';
import { CHANNELS } from '../store/channels.js';
import type { Db } from '../store/db.js';
import { recordServiceSeconds } from '../store/service-stats.js';
import { AccessCache } from './access-cache.js';
import { GatewayError, refuseUpgrade, sendError, type ErrorShape } from './errors.js';
import { then } from './maybe-async.js';
import { modelRequest, MODELS_PREFIX, sendModelList, serverModelCall } from './model-endpoint.js';
import { ProxyCore } from './proxy-core.js';
import { RoutingTable } from './routing-table.js';
import { serviceExchange, SERVICES_PREFIX } from './service-proxy.js';
import { ServiceStatsRecorder } from './stats.js';
import { storeRoutes } from './store-routes.js';

/**
 * Services share the server's origin with the console, whose session cookie the browser holds: every answer of the
 * in-server gateway puts a page in a sandbox with an opaque origin, which can neither read the console's API nor make
 * the browser send that cookie. No allow-same-origin; everything else a service's web UI needs stays allowed.
 */
export const SERVICE_SANDBOX_CSP = 'sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-downloads allow-modals';
const SANDBOX_HEADERS = { 'content-security-policy': SERVICE_SANDBOX_CSP };

export interface GatewayOptions {
  db: Db;
  logger: Logger;
  /** Names this process in the request statistics, which every server writes under its own name. */
  source: string;
}

/** The in-server gateway: `/proxy/services/...` and `/proxy/models/...`, with their own authentication and errors. */
export class Gateway {
  private readonly table: RoutingTable;
  private readonly stats: ServiceStatsRecorder;
  private readonly core: ProxyCore;
  private readonly access: AccessCache;

  constructor(private readonly options: GatewayOptions) {
    const { db, logger, source } = options;
    this.table = new RoutingTable(storeRoutes(db), logger);
    this.stats = new ServiceStatsRecorder((seconds) => recordServiceSeconds(db, source, seconds), logger);
    this.core = new ProxyCore(this.table, this.stats, () => db.notify(CHANNELS.runs), logger, SANDBOX_HEADERS);
    this.access = new AccessCache(db);
  }

  async start(): Promise<void> {
    await this.access.start();
    await this.table.start();
    this.stats.start();
  }

  /** Ends open tunnels and upstream connections, and writes the last statistics. */
  async close(): Promise<void> {
    this.core.close();
    await this.table.stop();
    await this.stats.stop();
    await this.access.stop();
  }

  handles(req: IncomingMessage): boolean {
    const url = req.url ?? '';
    return url.startsWith(SERVICES_PREFIX) || url.startsWith(MODELS_PREFIX);
  }

  /** A request whose caller and replica are known already is on its way to the replica when this returns. */
  web(req: IncomingMessage, res: ServerResponse): void {
    const shape: ErrorShape = req.url?.startsWith(MODELS_PREFIX) ? 'openai' : 'api';
    const refuse = (error: unknown) => sendError(res, this.known(req, error), shape, SANDBOX_HEADERS);
    try {
      const sent = shape === 'api'
        ? then(serviceExchange(this.access, this.table, req), (exchange) => this.core.web(req, res, exchange))
        : this.model(req, res);
      if (sent instanceof Promise) sent.catch(refuse);
    } catch (error) {
      refuse(error);
    }
  }

  private async model(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const request = await modelRequest(this.access, this.table, serverModelCall(req), req);
    if (request.kind === 'list') return sendModelList(res, request.body, SANDBOX_HEADERS);
    return this.core.web(req, res, request.exchange);
  }

  /** For the HTTP server's `upgrade` event: WebSockets to services; anything else is refused here. */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    this.core.track(socket);
    socket.on('error', () => socket.destroy());
    try {
      if (!req.url?.startsWith(SERVICES_PREFIX)) throw new GatewayError(404, 'not_found', `no WebSocket endpoint at ${req.url}`);
      await this.core.upgrade(req, socket, head, await serviceExchange(this.access, this.table, req));
    } catch (error) {
      refuseUpgrade(socket, this.known(req, error));
    }
  }

  private known(req: IncomingMessage, error: unknown): GatewayError {
    if (error instanceof GatewayError) return error;
    this.options.logger.error(`gateway: ${req.method} ${req.url}: ${(error as Error).stack ?? error}`);
    return new GatewayError(500, 'internal', 'internal server error');
  }
}
