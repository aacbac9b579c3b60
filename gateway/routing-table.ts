import type { Logger } from 'winston';
import type { ServiceRoute } from '../api/services.js';
import { coalesced } from './coalesce.js';

/** The routing table is read again at least this often, whatever a change signal says: a lost one costs at most this long. */
export const ROUTING_REFRESH_MS = 1000;

/** Where the routes come from: the database in a server, the server's API in a gateway process. */
export interface RouteSource {
  read(): Promise<ServiceRoute[]>;
  /** Calls `changed` whenever the routes may have changed; resolves to what stops it. */
  watch(changed: () => void): Promise<() => Promise<void>>;
}

/**
 * The gateway's copy of the routing table: services and their ready replicas. It is read again on every
 * routing or run change and once a second; when a read fails, the last copy keeps serving.
 */
export class RoutingTable {
  private byName = new Map<string, ServiceRoute>();
  private byRunId = new Map<string, ServiceRoute>();
  /** Reads the table; calls while a read runs make one more read after it, so that none misses a change. */
  readonly refresh = coalesced(() => this.read());
  private readonly waiters = new Set<() => void>();
  private readonly readListeners: ((routes: ServiceRoute[]) => void)[] = [];
  private timer: NodeJS.Timeout | undefined;
  private unwatch: (() => Promise<void>) | undefined;

  constructor(private readonly source: RouteSource, private readonly logger: Logger, private readonly intervalMs = ROUTING_REFRESH_MS) {}

  async start(): Promise<void> {
    this.unwatch = await this.source.watch(() => void this.refresh());
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.intervalMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.unwatch?.().catch(() => {});
    this.unwatch = undefined;
    await this.refresh();
    this.wakeWaiters();
  }

  /** Every service in the table. */
  routes(): ServiceRoute[] {
    return [...this.byName.values()];
  }

  service(project: string, run: string): ServiceRoute | undefined {
    return this.byName.get(`${project}/${run}`);
  }

  serviceById(runId: string): ServiceRoute | undefined {
    return this.byRunId.get(runId);
  }

  /** A project's services that publish a model, by run name so that a name two of them declare always leads to the same one. */
  models(project: string): ServiceRoute[] {
    return [...this.byName.values()].filter((route) => route.project === project && route.model !== null)
      .sort((a, b) => a.run.localeCompare(b.run));
  }

  /** Calls `listener` with the routes after every read that succeeds. */
  afterEachRead(listener: (routes: ServiceRoute[]) => void): void {
    this.readListeners.push(listener);
  }

  /** Resolves after the next read of the table, or after `timeoutMs`, whichever comes first. */
  nextRead(timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, timeoutMs));
      this.waiters.add(done);
    });
  }

  private async read(): Promise<void> {
    try {
      const routes = await this.source.read();
      this.byName = new Map(routes.map((route) => [`${route.project}/${route.run}`, route]));
      this.byRunId = new Map(routes.map((route) => [route.runId, route]));
      for (const listener of this.readListeners) listener(routes);
    } catch (error) {
      this.logger.warn(`gateway: reading the routing table failed, serving the last copy: ${(error as Error).message}`);
    }
    this.wakeWaiters();
  }

  private wakeWaiters(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}
