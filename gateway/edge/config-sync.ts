import type { Logger } from 'winston';
import type { GatewayConfig } from '../../api/gateway-process.js';
import type { Role } from '../../api/objects.js';
import { hashToken } from '../../store/projects.js';
import type { CallerAccess } from '../access.js';
import type { RouteSource } from '../routing-table.js';
import { ServerCallError, type ServerApi } from './server-api.js';

/** How often the gateway asks its server for the routing table: a change reaches it within this long. */
export const CONFIG_POLL_MS = 1000;

/**
 * The gateway's last copy of what its server said: routes, callers and certificates, asked for once a second.
 * While the server does not answer, the last copy keeps serving; a server that says the gateway is no more
 * (its token refused) ends it.
 */
export class ConfigSync implements RouteSource, CallerAccess {
  private current: GatewayConfig | null = null;
  private roles = new Map<string, Role | null>();
  private readonly listeners = new Set<() => void>();
  private timer: NodeJS.Timeout | undefined;
  private serverDown = false;
  private firstCopy: Promise<void>;
  private gotFirstCopy: () => void = () => {};

  constructor(private readonly api: ServerApi, private readonly logger: Logger, private readonly onRevoked: (reason: string) => void, private readonly pollMs = CONFIG_POLL_MS) {
    this.firstCopy = new Promise((resolve) => { this.gotFirstCopy = resolve; });
  }

  get config(): GatewayConfig | null {
    return this.current;
  }

  /** Polls from now on; resolves once the first copy came (a server down at start is waited for). */
  async start(): Promise<void> {
    const poll = async () => {
      await this.poll();
      this.timer = setTimeout(() => void poll(), this.pollMs);
    };
    void poll();
    await this.firstCopy;
  }

  stop(): void {
    clearTimeout(this.timer);
    this.gotFirstCopy();
  }

  /** Calls `changed` after each new copy. */
  onChange(changed: () => void): () => void {
    this.listeners.add(changed);
    return () => this.listeners.delete(changed);
  }

  async read() {
    return this.current?.routes ?? [];
  }

  async watch(changed: () => void) {
    const stop = this.onChange(changed);
    return async () => { stop(); };
  }

  roleOf(token: string, projectId: string): Role | null | undefined {
    const role = this.roles.get(hashToken(token));
    if (role === undefined) return undefined;
    return projectId === this.current?.gateway.projectId ? role : null;
  }

  private async poll(): Promise<void> {
    let config: GatewayConfig;
    try {
      config = await this.api.config();
    } catch (error) {
      if (error instanceof ServerCallError && error.status === 401) return this.onRevoked(error.message);
      if (!this.serverDown) this.logger.warn(`gateway: ${(error as Error).message}; serving from the last copy of the routing table`);
      this.serverDown = true;
      return;
    }
    if (this.serverDown) this.logger.info('gateway: the server answers again');
    this.serverDown = false;
    this.current = config;
    this.roles = new Map(config.callers.map((caller) => [caller.tokenHash, caller.role]));
    for (const changed of this.listeners) changed();
    this.gotFirstCopy();
  }
}
