import type { KubeConfig, V1Pod } from '@kubernetes/client-node';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest, type AgentOptions } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import { createProxyMiddleware, type RequestHandler } from 'http-proxy-middleware';
import { AGENT_FORWARD_AUTH_HEADER } from '../../api/agent.js';
import type { AgentPodSettings } from './pod.js';

/** Where the server finds a running pod's agent. */
export interface AgentAddress {
  agentUrl(pod: V1Pod): Promise<string>;
  close?(): Promise<void>;
}

/** The agent at the pod's own IP: for a server that runs in the cluster, or anywhere that routes to pod IPs. */
export class PodIpAddress implements AgentAddress {
  constructor(private readonly settings: AgentPodSettings) {}

  async agentUrl(pod: V1Pod): Promise<string> {
    const ip = pod.status!.podIP!;
    return `http://${ip.includes(':') ? `[${ip}]` : ip}:${this.settings.agentPort}`;
  }
}

/**
 * The agent through the API server's pod proxy (`/api/v1/namespaces/N/pods/P:port/proxy/...`), for a server outside
 * the cluster. The rest of the server speaks plain HTTP to agents, with the agent's token as a bearer token; this
 * relays on loopback, so `http://127.0.0.1:<relay>/<namespace>/<pod>` stands for the pod's agent. The API server
 * takes the Authorization header for its own credentials, so the agent's token travels in the agent's forward header.
 */
export class ApiProxyRelay implements AgentAddress {
  private listening: Promise<Server> | null = null;

  constructor(private readonly config: KubeConfig, private readonly settings: AgentPodSettings) {}

  async agentUrl(pod: V1Pod): Promise<string> {
    const server = await this.start();
    const { port } = server.address() as AddressInfo;
    return `http://127.0.0.1:${port}/${pod.metadata!.namespace}/${pod.metadata!.name}`;
  }

  async close(): Promise<void> {
    const listening = this.listening;
    this.listening = null;
    const server = await listening?.catch(() => null);
    if (!server) return;
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }

  private start(): Promise<Server> {
    this.listening ??= this.listen().catch((error) => {
      this.listening = null;
      throw error;
    });
    return this.listening;
  }

  private async listen(): Promise<Server> {
    const tls: AgentOptions = {};
    await this.config.applyToHTTPSOptions(tls);
    const proxy = createProxyMiddleware({
      target: this.config.getCurrentCluster()!.server,
      changeOrigin: true,
      // Upgrades come through `proxy.upgrade` below, after the credentials: with `ws: true` the library would also
      // take every upgrade itself, without them, and refuse any that is not a WebSocket.
      ws: false,
      agent: new HttpsAgent({ ca: tls.ca, cert: tls.cert, key: tls.key, rejectUnauthorized: tls.rejectUnauthorized, keepAlive: true }),
      pathRewrite: (path) => this.apiServerPath(path) ?? path,
    });
    const server = createServer((req, res) => void this.relay(proxy, req, res));
    server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => void this.credentials(req).then(
      () => (req.headers.upgrade?.toLowerCase() === 'websocket' ? proxy.upgrade(req, socket, head) : this.passUpgrade(req, socket, head, tls)),
      () => socket.destroy(),
    ));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    server.unref();
    return server;
  }

  private async relay(proxy: RequestHandler, req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (this.apiServerPath(req.url ?? '') === null) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: 'not_found', message: 'expected /<namespace>/<pod>/...' } }));
      return;
    }
    try {
      await this.credentials(req);
    } catch (error) {
      res.writeHead(502, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { code: 'bad_gateway', message: `kubernetes credentials: ${(error as Error).message}` } }));
      return;
    }
    await proxy(req, res, () => res.writeHead(502).end());
  }

  /**
   * An upgrade to another protocol than WebSocket (the gateway's tunnels to a replica), which the proxy library
   * refuses: sent to the API server as it came, and its answer relayed back, the connection's bytes after a switch.
   */
  private passUpgrade(req: IncomingMessage, socket: Socket, head: Buffer, tls: AgentOptions): void {
    socket.on('error', () => socket.destroy());
    const path = this.apiServerPath(req.url ?? '');
    if (path === null) return void socket.destroy();
    const cluster = new URL(this.config.getCurrentCluster()!.server);
    const send = cluster.protocol === 'http:' ? httpRequest : httpsRequest;
    const upstream = send({
      host: cluster.hostname, port: cluster.port || (cluster.protocol === 'http:' ? 80 : 443), path, method: req.method,
      headers: { ...req.headers, host: cluster.host }, ca: tls.ca, cert: tls.cert, key: tls.key, rejectUnauthorized: tls.rejectUnauthorized, agent: false,
    });
    upstream.once('upgrade', (answer: IncomingMessage, tunnel: Socket, tunnelHead: Buffer) => {
      socket.write(`HTTP/1.1 101 Switching Protocols\r\n${headerLines(answer.rawHeaders)}\r\n`);
      if (tunnelHead.length > 0) socket.write(tunnelHead);
      if (head.length > 0) tunnel.write(head);
      tunnel.pipe(socket).pipe(tunnel);
      tunnel.once('error', () => socket.destroy());
      tunnel.once('close', () => socket.destroy());
      socket.once('close', () => tunnel.destroy());
    });
    upstream.once('response', (answer: IncomingMessage) => {
      const chunks: Buffer[] = [];
      answer.on('data', (chunk: Buffer) => chunks.push(chunk)).once('end', () => {
        const body = Buffer.concat(chunks);
        const type = answer.headers['content-type'] ?? 'text/plain';
        socket.end(Buffer.concat([Buffer.from(`HTTP/1.1 ${answer.statusCode} ${answer.statusMessage}\r\ncontent-type: ${type}\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`), body]));
      });
    });
    upstream.once('error', () => socket.destroy());
    socket.once('close', () => upstream.destroy());
    upstream.end();
  }

  /** `/<namespace>/<pod>/rest?query` → the API server's proxy path to the agent port of that pod; null for any other path. */
  private apiServerPath(path: string): string | null {
    const match = /^\/([a-z0-9-]+)\/([a-z0-9.-]+)(\/.*)?$/.exec(path);
    if (!match) return null;
    const [, namespace, pod, rest = '/'] = match;
    return `/api/v1/namespaces/${namespace}/pods/${pod}:${this.settings.agentPort}/proxy${rest}`;
  }

  /** The agent's token moves to the agent's own header; Authorization becomes the cluster's credentials, fresh for each request. */
  private async credentials(req: IncomingMessage): Promise<void> {
    const options: { headers: Record<string, string> } = { headers: {} };
    await this.config.applyToHTTPSOptions(options);
    if (req.headers[AGENT_FORWARD_AUTH_HEADER] === undefined && req.headers.authorization) req.headers[AGENT_FORWARD_AUTH_HEADER] = req.headers.authorization;
    const clusterAuthorization = options.headers.Authorization ?? options.headers.authorization;
    if (clusterAuthorization) req.headers.authorization = clusterAuthorization;
    else delete req.headers.authorization;
  }
}

function headerLines(rawHeaders: string[]): string {
  let lines = '';
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) lines += `${rawHeaders[i]}: ${rawHeaders[i + 1]}\r\n`;
  return lines;
}

export type AgentAddressSetting = 'auto' | 'pod-ip' | 'api-proxy';

/** The way `setting` names; `auto` is the pod IP for a server that runs in a pod (Kubernetes gives it KUBERNETES_SERVICE_HOST), else the API server's proxy. */
export function agentAddress(setting: AgentAddressSetting): (config: KubeConfig, settings: AgentPodSettings) => AgentAddress {
  const inCluster = Boolean(process.env.KUBERNETES_SERVICE_HOST);
  const podIp = setting === 'pod-ip' || (setting === 'auto' && inCluster);
  return (config, settings) => podIp ? new PodIpAddress(settings) : new ApiProxyRelay(config, settings);
}
