import { ServerResponse, type IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { pipeline } from 'node:stream';
import type Koa from 'koa';
import { createWebSocketStream, WebSocket, WebSocketServer } from 'ws';
import { AGENT_FORWARD_AUTH_HEADER, SSH_AUTHORIZED_KEYS_HEADER } from '../../api/agent.js';
import { FINISHED_RUN_STATUSES } from '../../api/status.js';
import { GatewayError, refuseUpgrade } from '../../gateway/errors.js';
import { getInstance } from '../../store/instances.js';
import type { RunRecord } from '../../store/runs.js';
import { authorizedKeysOf } from '../../store/ssh-keys.js';
import { isMultiNodeParent } from '../../store/nodes.js';
import { sshReplica } from '../../store/ssh-targets.js';
import { authMiddleware, currentUser, runFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, HttpError } from '../http-errors.js';

/** `/api/projects/:project/runs/:run/ssh`, with an optional query. */
const SSH_PATH = /^\/api\/projects\/([^/?]+)\/runs\/([^/?]+)\/ssh(?:\?|$)/i;
const AGENT_HANDSHAKE_TIMEOUT_MS = 10_000;

const notRunning = (what: string, status: string) => new HttpError(409, 'not_running', `${what} is ${status}; ssh reaches a run only while it runs`);

/**
 * `GET /api/projects/:project/runs/:run/ssh[?replica=N]`, a WebSocket: the user's SSH connection, carried to the agent
 * of the run's instance, which speaks SSH itself and lets in only the keys the user registered. The server reads none
 * of it: the session is encrypted end to end between the user's ssh and the agent, whose host key the user pinned.
 */
export class SshRelay {
  private readonly clients = new WebSocketServer({ noServer: true, perMessageDeflate: false });
  private readonly open = new Set<{ terminate(): void }>();

  constructor(private readonly server: ServerContext, private readonly app: Koa) {}

  handles(req: IncomingMessage): boolean {
    return SSH_PATH.test(req.url ?? '');
  }

  /** For the HTTP server's `upgrade` event; every refusal is answered on the raw socket in the API's error shape. */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    let agent: AgentConnection | undefined;
    try {
      const [, project, run] = SSH_PATH.exec(req.url ?? '')!;
      const ctx = this.app.createContext(req, new ServerResponse(req));
      await authMiddleware(this.server.db)(ctx, async () => undefined);
      if (req.method !== 'GET') throw new HttpError(405, 'method_not_allowed', `${req.method} is not allowed on ${ctx.path}`);
      if (req.headers.upgrade?.toLowerCase() !== 'websocket') throw badRequest('expected a WebSocket upgrade (Upgrade: websocket)');
      const job = await this.jobOf(await runFor(this.server.db, ctx, decodeURIComponent(project!), decodeURIComponent(run!)).then((found) => found.run), ctx.query.replica);
      const instance = job.instanceId ? await getInstance(this.server.db, job.instanceId) : null;
      if (!instance?.agentUrl) throw notRunning(`run ${job.name}`, 'not on an instance yet');
      const keys = await authorizedKeysOf(this.server.db, currentUser(ctx).id);
      if (keys === '') throw new HttpError(403, 'no_ssh_keys', 'you have no SSH key registered; orchestrator apply registers ~/.orchestrator/ssh/id_ed25519.pub');
      agent = await connectAgent(instance.agentUrl, instance.agentToken, job.jobId ?? job.id, keys);
      const upstream = agent;
      // A client that left meanwhile, or whose handshake the WebSocket server refuses, never reaches the relay.
      socket.once('close', () => upstream.socket.terminate());
      if (socket.destroyed) return upstream.socket.terminate();
      this.clients.handleUpgrade(req, socket, head, (client) => this.relay(client, upstream));
    } catch (error) {
      agent?.socket.terminate();
      refuseUpgrade(socket, this.known(req, error));
    }
  }

  /** Ends every relayed connection, for a server that stops. */
  close(): void {
    for (const connection of this.open) connection.terminate();
    this.clients.close();
  }

  /** The job to enter: the run's own, or one of a service's replicas (a multi-node task's nodes, by rank). */
  private async jobOf(run: RunRecord, rawReplica: string | string[] | undefined): Promise<RunRecord> {
    if (rawReplica !== undefined && (typeof rawReplica !== 'string' || !/^\d{1,6}$/.test(rawReplica))) throw badRequest('replica: expected a replica number such as 0');
    const service = (run.kind === 'service' && !run.jobId) || isMultiNodeParent(run);
    if (service ? FINISHED_RUN_STATUSES.includes(run.status) : run.status !== 'running') throw notRunning(`run ${run.name}`, run.status);
    if (!service) {
      if (rawReplica !== undefined) throw badRequest(`replica: run ${run.name} is a ${run.kind}, not a service with replicas`);
      return run;
    }
    const replica = await sshReplica(this.server.db, run.id, rawReplica === undefined ? null : Number(rawReplica));
    const part = run.kind === 'service' ? 'replica' : 'node';
    if (!replica) throw notRunning(rawReplica === undefined ? `every ${part} of ${run.kind} ${run.name}` : `${part} ${rawReplica} of ${run.kind} ${run.name}`, 'not running');
    return replica;
  }

  /** Both ways with backpressure; either side closing or failing closes the other. */
  private relay(client: WebSocket, agent: AgentConnection): void {
    const connection = { terminate: () => { client.terminate(); agent.socket.terminate(); } };
    this.open.add(connection);
    const fromClient = createWebSocketStream(client);
    const fromAgent = agent.stream;
    const end = () => {
      this.open.delete(connection);
      connection.terminate();
    };
    pipeline(fromClient, fromAgent, end);
    pipeline(fromAgent, fromClient, end);
  }

  private known(req: IncomingMessage, error: unknown): GatewayError {
    if (error instanceof GatewayError) return error;
    if (error instanceof HttpError) return new GatewayError(error.status, error.code, error.message);
    this.server.logger.error(`ssh ${req.url}: ${(error as Error).stack ?? error}`);
    return new GatewayError(500, 'internal', 'internal server error');
  }
}

interface AgentConnection {
  socket: WebSocket;
  /** Made with the socket: the agent speaks first (its SSH banner), and a message with no listener yet would be lost. */
  stream: Duplex;
}

/** Opens the agent's SSH endpoint for the job; a refusal or no answer is a 502 that says which. */
function connectAgent(agentUrl: string, agentToken: string, jobId: string, authorizedKeys: string): Promise<AgentConnection> {
  const url = `${agentUrl.replace(/^http/, 'ws').replace(/\/+$/, '')}/api/jobs/${encodeURIComponent(jobId)}/ssh`;
  const agent = new WebSocket(url, {
    headers: { [AGENT_FORWARD_AUTH_HEADER]: `Bearer ${agentToken}`, [SSH_AUTHORIZED_KEYS_HEADER]: Buffer.from(authorizedKeys).toString('base64') },
    perMessageDeflate: false,
    handshakeTimeout: AGENT_HANDSHAKE_TIMEOUT_MS,
  });
  const stream = createWebSocketStream(agent);
  // Failures are answered from the socket's events below, and after the open by the relay's pipeline.
  stream.on('error', () => undefined);
  return new Promise((resolve, reject) => {
    agent.once('open', () => resolve({ socket: agent, stream }));
    agent.once('unexpected-response', (_request, response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk)).on('end', () => {
        reject(new GatewayError(502, 'agent_refused', `the instance's agent refused the SSH connection (${response.statusCode}): ${agentMessage(Buffer.concat(chunks).toString('utf8'))}`));
        agent.terminate();
      });
    });
    // Kept for the connection's life: an error after the open must not go unheard before the relay listens.
    agent.on('error', (error) => reject(new GatewayError(502, 'agent_unreachable', `the instance's agent did not answer: ${error.message}`)));
  });
}

function agentMessage(body: string): string {
  try {
    return (JSON.parse(body) as { error?: { message?: string } }).error?.message ?? body.slice(0, 200);
  } catch {
    return body.slice(0, 200) || 'no reason given';
  }
}
