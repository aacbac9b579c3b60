import type { Offer } from '../../api/offer.js';
import type { SshHost } from '../../api/ssh-fleet.js';
import { BackendError, type Backend, type BackendInstance, type CreateInstanceRequest } from '../backend.js';
import { agentFiles } from './agent-bundle.js';
import { SshConnection, type HostKeyBook } from './connection.js';
import { probeHost, type HostFacts } from './host-facts.js';
import { agentPort, fleetAgents, installAgent, isInstalled, startSupervisor, supervisorRuns, uninstallAgent, waitForAgentPort } from './install.js';
import { AgentTunnel } from './tunnel.js';

export interface SshHostBackendOptions {
  host: SshHost;
  keys: HostKeyBook;
  /** The fleet the host belongs to: an agent of that fleet on the host other than this instance's is a stale one. */
  fleetId: string;
  /** Folder where the agent bundle is built when the installation has none. */
  stateDir: string;
}

type Install = { state: 'running' } | { state: 'failed'; reason: string } | { state: 'done' };

/**
 * One host of an SSH fleet as a backend of one instance: create installs the agent over SSH and starts it,
 * get reaches it through a tunnel of the SSH connection (starting it again where its supervisor is gone),
 * terminate stops it and removes what was installed. What is on the host is the truth, so that a restarted
 * server finds the agent again.
 */
export class SshHostBackend implements Backend {
  readonly type = 'ssh' as const;
  private connection: Promise<SshConnection> | null = null;
  private facts: HostFacts | null = null;
  private install: Install | null = null;
  private tunnel: AgentTunnel | null = null;
  private port: number | null = null;

  constructor(private readonly options: SshHostBackendOptions) {}

  get host(): SshHost {
    return this.options.host;
  }

  async offers(): Promise<Offer[]> {
    return this.facts ? [this.offer(this.facts)] : [];
  }

  /** Connects and learns the host (so that SSH's errors are the answer), then installs and starts the agent in the background. */
  async create(request: CreateInstanceRequest): Promise<BackendInstance> {
    const connection = await this.connect();
    const facts = await probeHost(connection, this.host, this.host.network ?? undefined);
    this.facts = facts;
    if (!(await agentFiles(this.options.stateDir, facts.arch))) throw new BackendError(`${this.host.name} is ${facts.arch}, and this server has a Node runtime for ${process.arch} only`, false);
    if (this.install?.state !== 'running' && await isInstalled(connection, facts, request.idempotencyKey) && await supervisorRuns(connection, facts, request.idempotencyKey)) {
      // Installed by an earlier create whose answer was lost (a crash): the agent runs already.
      this.install = { state: 'done' };
    }
    if (this.install === null || this.install.state === 'failed') {
      this.install = { state: 'running' };
      this.replaceStaleAgents(connection, facts, request).then(
        () => { this.install = { state: 'done' }; },
        (error: Error) => { this.install = { state: 'failed', reason: error.message }; },
      );
    }
    return this.describe(request.idempotencyKey, 'provisioning', null);
  }

  /**
   * A host is in its fleet once, so another agent of the fleet on it belongs to an instance that ended without
   * being uninstalled (the host was away, or its key had changed): it is removed before this one is installed.
   */
  private async replaceStaleAgents(connection: SshConnection, facts: HostFacts, request: CreateInstanceRequest): Promise<void> {
    for (const stale of await fleetAgents(connection, facts, this.options.fleetId)) {
      if (stale !== request.idempotencyKey) await uninstallAgent(connection, facts, stale);
    }
    const files = (await agentFiles(this.options.stateDir, facts.arch))!;
    await installAgent(connection, facts, files, request.idempotencyKey, request.agentToken, this.options.fleetId);
  }

  async get(id: string): Promise<BackendInstance> {
    if (this.install?.state === 'running') return this.describe(id, 'provisioning', null);
    if (this.install?.state === 'failed') return this.describe(id, 'failed', null, `installing the agent on ${this.host.name} failed: ${this.install.reason}`);
    let connection: SshConnection;
    try {
      connection = await this.connect();
      this.facts ??= await probeHost(connection, this.host, this.host.network ?? undefined, false);
    } catch (error) {
      if (error instanceof BackendError && !error.retryable) return this.describe(id, 'failed', null, error.message);
      return this.describe(id, 'provisioning', null, (error as Error).message);
    }
    if (!(await isInstalled(connection, this.facts, id))) return this.describe(id, 'terminated', null, `the agent is no longer installed on ${this.host.name}`);
    if (!(await supervisorRuns(connection, this.facts, id))) await startSupervisor(connection, this.facts, id);
    this.port = this.install?.state === 'done' && this.port === null
      ? await waitForAgentPort(connection, this.facts, id)
      : await agentPort(connection, this.facts, id);
    this.install = null;
    if (this.port === null) return this.describe(id, 'provisioning', null, 'the agent is starting');
    this.tunnel ??= await AgentTunnel.open(() => this.dialAgent(id));
    return this.describe(id, 'running', this.tunnel.url);
  }

  async list(): Promise<BackendInstance[]> {
    return [];
  }

  /** Stops the agent and removes what was installed; a host that cannot be reached is an error, so that nothing is left behind unsaid. */
  async terminate(id: string): Promise<void> {
    this.install = null;
    const connection = await this.connect();
    const facts = this.facts ?? await probeHost(connection, this.host, this.host.network ?? undefined, false);
    await uninstallAgent(connection, facts, id);
    await this.close();
  }

  async close(): Promise<void> {
    this.tunnel?.close();
    this.tunnel = null;
    const connection = this.connection;
    this.connection = null;
    (await connection?.catch(() => null))?.close();
  }

  /** The open connection, or a new one: one at a time, and a failed attempt is not kept. */
  private connect(): Promise<SshConnection> {
    if (!this.connection) {
      const opening = SshConnection.open(this.host, this.options.keys);
      this.connection = opening;
      opening.then((connection) => connection.onClose(() => {
        if (this.connection === opening) this.connection = null;
      }), () => {
        if (this.connection === opening) this.connection = null;
      });
    }
    return this.connection;
  }

  /** A stream to the agent; where its port is refused (the agent was started again), the port it prints now. */
  private async dialAgent(id: string): Promise<NodeJS.ReadWriteStream> {
    const connection = await this.connect();
    if (this.port !== null) {
      try {
        return await connection.forwardToLoopback(this.port);
      } catch {
        // The agent's port changes when its supervisor starts it again.
      }
    }
    this.port = this.facts ? await agentPort(connection, this.facts, id) : null;
    if (this.port === null) throw new Error(`the agent on ${this.host.name} is not listening`);
    return connection.forwardToLoopback(this.port);
  }

  private offer(facts: HostFacts): Offer {
    return {
      backend: 'ssh', offerId: this.host.name, gpu: facts.gpu, cpus: facts.cpus, memoryMib: facts.memoryMib, diskMib: facts.diskMib,
      region: this.host.name, pricePerHour: 0, availability: 'available',
    };
  }

  private describe(id: string, status: BackendInstance['status'], agentUrl: string | null, reason?: string): BackendInstance {
    return {
      id, idempotencyKey: id, status, agentUrl, region: this.host.name,
      ...(reason ? { reason } : {}),
      ...(this.facts ? { offer: this.offer(this.facts), internalIp: this.facts.internalIp } : {}),
    };
  }
}
