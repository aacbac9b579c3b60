import { request, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { Pool } from 'undici';
import { AGENT_TUNNEL_PROTOCOL } from '../api/agent.js';
import type { ReplicaRoute } from '../api/services.js';
import { POOLED_SOCKET_IDLE_MS } from '../agent/http-forward.js';

/** Where a replica's port forward is: the agent's address, the forward's path and the agent's own headers. */
export interface ForwardAccess {
  host: string;
  port: number;
  /** `/api/jobs/<id>/ports/<port>` under the agent's base path. */
  basePath: string;
  /** The agent's token: sent once per tunnel, never to the job. */
  headers: Record<string, string>;
}

/** The agent would not open a tunnel: its answer, in the API's error shape. */
export class TunnelRefused extends Error {
  constructor(readonly status: number, readonly code: string, message: string) {
    super(message);
  }
}

/** An agent that neither opens nor refuses a tunnel by then is taken as unreachable. */
const TUNNEL_OPEN_TIMEOUT_MS = 10_000;

/** The agent's refusals are small JSON; a larger answer is not the agent's. */
const REFUSAL_MAX_BYTES = 4096;

async function refusalOf(answer: IncomingMessage): Promise<TunnelRefused> {
  const status = answer.statusCode ?? 502;
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of answer) {
    size += (chunk as Buffer).length;
    if (size > REFUSAL_MAX_BYTES) break;
    chunks.push(chunk as Buffer);
  }
  try {
    const { error } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { error?: { code?: unknown; message?: unknown } };
    if (typeof error?.code === 'string') return new TunnelRefused(status, error.code, String(error.message ?? error.code));
  } catch { /* not the agent's error shape */ }
  return new TunnelRefused(502, 'upstream_failed', `the replica's agent answered ${status} instead of opening a tunnel`);
}

/** Asks the agent for a byte tunnel to the replica's port: the socket, once the agent has switched it. */
export function openTunnel(access: ForwardAccess): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const opening = request({
      host: access.host, port: access.port, path: `${access.basePath}/`, agent: false,
      headers: { ...access.headers, connection: 'Upgrade', upgrade: AGENT_TUNNEL_PROTOCOL },
    });
    const timer = setTimeout(() => opening.destroy(new Error(`the replica's agent did not open a tunnel within ${TUNNEL_OPEN_TIMEOUT_MS / 1000} s`)), TUNNEL_OPEN_TIMEOUT_MS);
    opening.once('close', () => clearTimeout(timer));
    opening.once('upgrade', (_answer, socket: Socket, head: Buffer) => {
      clearTimeout(timer);
      if (head.length > 0) socket.unshift(head);
      socket.setNoDelay(true);
      resolve(socket);
    });
    opening.once('response', (answer) => {
      clearTimeout(timer);
      void refusalOf(answer).then(reject, reject);
    });
    opening.once('error', reject);
    opening.end();
  });
}

/**
 * A keep-alive pool of one replica's tunnels (undici's, whose `dispatch` takes no stream or message object per
 * request): each pooled connection is a tunnel through the replica's agent, opened (and authenticated) once, that
 * then carries request after request straight to the replica. The origin only names the pool: `connect` opens the tunnels.
 */
function tunnelPool(access: ForwardAccess): Pool {
  return new Pool(`http://tunnel.invalid`, {
    keepAliveTimeout: POOLED_SOCKET_IDLE_MS,
    keepAliveMaxTimeout: POOLED_SOCKET_IDLE_MS,
    connect: (_options, callback) => {
      openTunnel(access).then((socket) => callback(null, socket), (error: Error) => callback(error, null));
    },
  });
}

/** A replica's place: a replica moved to another agent, port or token gets a pool of its own. */
function placeOf(replica: ReplicaRoute): string {
  return `${replica.id}\n${replica.agentUrl}\n${replica.port}\n${replica.agentToken}`;
}

/** The tunnel pools of the replicas in rotation. */
export class ReplicaTunnels {
  private readonly pools = new Map<string, Pool>();

  poolOf(replica: ReplicaRoute, access: () => ForwardAccess): Pool {
    const place = placeOf(replica);
    let pool = this.pools.get(place);
    if (!pool) this.pools.set(place, pool = tunnelPool(access()));
    return pool;
  }

  /** Retires the pools of replicas no longer in rotation: their idle tunnels close now, the busy ones after their exchange. */
  keepOnly(replicas: readonly ReplicaRoute[]): void {
    const kept = new Set(replicas.map(placeOf));
    for (const [place, pool] of this.pools) {
      if (kept.has(place)) continue;
      // Closing lets the exchanges under way finish and ends the idle tunnels now.
      void pool.close();
      this.pools.delete(place);
    }
  }

  close(): void {
    for (const pool of this.pools.values()) void pool.destroy();
    this.pools.clear();
  }
}
