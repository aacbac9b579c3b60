import type { IncomingMessage } from 'node:http';
import { connect } from 'node:net';
import type { Duplex } from 'node:stream';
import ssh2, { type Connection, type ParsedKey } from 'ssh2';
import type { Logger } from 'winston';
import { createWebSocketStream, WebSocketServer, type WebSocket } from 'ws';
import { AGENT_FORWARD_AUTH_HEADER, SSH_AUTHORIZED_KEYS_HEADER, type JobStatus } from '../../api/agent.js';
import { HttpError } from '../http-errors.js';
import type { JobManager } from '../jobs.js';
import { refuseUpgrade, type JobPorts } from '../port-forward.js';
import { parseAuthorizedKeys, publicKeyAccepted } from './authorized-keys.js';
import type { HostKey } from './host-key.js';
import type { JobTarget } from './job-target.js';
import { serveSession } from './session.js';

/** `/api/jobs/<id>/ssh`. */
const SSH_URL = /^\/api\/jobs\/([^/?#]+)\/ssh(?:[?#].*)?$/;
/** How often open connections check that their job still runs: they end with it. */
const JOB_CHECK_MS = 2000;

export interface SshAccessOptions {
  jobs: JobManager;
  ports: JobPorts;
  target: JobTarget;
  hostKey: HostKey;
  authorized(credential: string | undefined): boolean;
  logger: Logger;
}

export interface SshActivity {
  sshConnections?: number;
  lastSshActivityAt?: string;
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value.join(', ') : value;
}

/**
 * Refuses a channel with a reason the client prints ("open failed: ..."). ssh2's reject sends an
 * empty description, so the reason is put into the one refusal that reject() sends, synchronously.
 */
function refuseChannel(client: Connection, reject: () => void, reason: string): void {
  const protocol = (client as unknown as { _protocol?: { channelOpenFail(recipient: number, code: number, description: string, lang?: string): void } })._protocol;
  if (!protocol) {
    reject();
    return;
  }
  const original = protocol.channelOpenFail;
  protocol.channelOpenFail = (recipient, code) => original.call(protocol, recipient, code, reason);
  try {
    reject();
  } finally {
    protocol.channelOpenFail = original;
  }
}

/**
 * SSH into running jobs: a WebSocket upgrade on `GET /api/jobs/:id/ssh` carries one SSH connection,
 * which this agent serves itself (ssh2) with its host key, accepting only the keys the caller lists.
 */
export class SshAccess {
  private readonly webSockets = new WebSocketServer({ noServer: true, perMessageDeflate: false });
  private readonly open = new Set<WebSocket>();
  private readonly activity = new Map<string, { connections: number; lastAt: number }>();

  constructor(private readonly options: SshAccessOptions) {}

  static handles(url: string | undefined): boolean {
    return SSH_URL.test(url ?? '');
  }

  /** For the HTTP server's `upgrade` event, on a request `handles` accepts. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    try {
      const { job, keys } = this.admitted(req);
      this.webSockets.handleUpgrade(req, socket, head, (webSocket) => this.serve(job.jobId, keys, webSocket));
    } catch (error) {
      const refusal = error instanceof HttpError ? error : new HttpError(500, 'internal', 'internal error');
      refuseUpgrade(socket, refusal, refusal.status === 401 ? { 'WWW-Authenticate': 'Bearer' } : {});
    }
  }

  /** Open SSH connections into a job and when one last carried anything. */
  activityOf(jobId: string): SshActivity {
    const known = this.activity.get(jobId);
    if (!known) return {};
    return { sshConnections: known.connections, lastSshActivityAt: new Date(known.lastAt).toISOString() };
  }

  forget(jobId: string): void {
    this.activity.delete(jobId);
  }

  close(): void {
    for (const webSocket of this.open) webSocket.terminate();
    this.webSockets.close();
  }

  private admitted(req: IncomingMessage): { job: JobStatus; keys: ParsedKey[] } {
    const credential = header(req, AGENT_FORWARD_AUTH_HEADER) ?? header(req, 'authorization');
    if (!this.options.authorized(credential)) throw new HttpError(401, 'unauthorized', 'a valid bearer token is required');
    let jobId: string;
    try {
      jobId = decodeURIComponent(SSH_URL.exec(req.url ?? '')![1]!);
    } catch {
      throw new HttpError(404, 'job_not_found', 'no such job');
    }
    const job = this.options.jobs.status(jobId);
    if (!job) throw new HttpError(404, 'job_not_found', `no job ${jobId}`);
    if (job.state !== 'running') throw new HttpError(409, 'job_not_running', `job ${jobId} is ${job.state}, not running`);
    const keys = parseAuthorizedKeys(Buffer.from(header(req, SSH_AUTHORIZED_KEYS_HEADER) ?? '', 'base64').toString('utf8'));
    if (keys.length === 0) {
      throw new HttpError(400, 'no_authorized_keys', `${SSH_AUTHORIZED_KEYS_HEADER} must hold base64 of authorized_keys text with at least one public key`);
    }
    return { job, keys };
  }

  private serve(jobId: string, keys: ParsedKey[], webSocket: WebSocket): void {
    const { logger } = this.options;
    const stream = createWebSocketStream(webSocket);
    stream.on('error', () => webSocket.terminate());
    this.open.add(webSocket);
    const activity = this.activity.get(jobId) ?? { connections: 0, lastAt: Date.now() };
    this.activity.set(jobId, activity);
    activity.connections += 1;
    activity.lastAt = Date.now();
    const touch = () => { activity.lastAt = Date.now(); };
    stream.on('data', touch);
    const jobCheck = setInterval(() => {
      if (this.options.jobs.status(jobId)?.state !== 'running') webSocket.terminate();
    }, JOB_CHECK_MS);
    // The stream only ends its readable side when the WebSocket closes: the connection is over then.
    webSocket.once('close', () => {
      clearInterval(jobCheck);
      this.open.delete(webSocket);
      activity.connections -= 1;
      touch();
      stream.destroy();
    });

    const server = new ssh2.Server({ hostKeys: [this.options.hostKey.privateKey] }, (client) => {
      client.on('error', (error) => logger.info('ssh connection error', { jobId, error: error.message }));
      client.on('authentication', (context) => {
        if (context.method === 'publickey' && publicKeyAccepted(keys, context)) context.accept();
        else context.reject(['publickey']);
      });
      client.on('ready', () => {
        logger.info('ssh connection opened', { jobId });
        client.on('session', (accept) => serveSession(accept(), {
          start: async (request) => this.options.target.start(this.running(jobId), request),
          files: async () => this.options.target.files(this.running(jobId)),
        }, logger));
        client.on('tcpip', (accept, reject, { destIP, destPort }) => {
          this.destination(jobId, destIP, destPort).then(
            (upstream) => {
              const socket = connect(upstream.port, upstream.host);
              let connected = false;
              socket.once('connect', () => {
                connected = true;
                const channel = accept();
                channel.on('data', touch);
                socket.on('data', touch);
                socket.pipe(channel).pipe(socket);
                channel.once('close', () => socket.destroy());
                socket.once('close', () => channel.close());
              });
              socket.once('error', (error) => {
                if (!connected) refuseChannel(client, reject, `nothing answers on port ${destPort} of the job: ${error.message}`);
              });
            },
            (error: Error) => refuseChannel(client, reject, error.message),
          );
        });
        client.on('request', (_accept, reject, name) => {
          logger.info('ssh global request refused', { jobId, name });
          reject?.();
        });
      });
    });
    server.injectSocket(stream as never);
  }

  private running(jobId: string): JobStatus {
    const job = this.options.jobs.status(jobId);
    if (job?.state !== 'running') throw new Error(`job ${jobId} is not running`);
    return job;
  }

  /** Where `ssh -L` to `host:port` goes: only the job's own ports, named as localhost. */
  private async destination(jobId: string, host: string, port: number): Promise<{ host: string; port: number }> {
    if (!['localhost', '127.0.0.1', '::1', '0.0.0.0'].includes(host)) {
      throw new Error(`only the job's own ports can be forwarded (localhost:<port>), not ${host}`);
    }
    const job = this.running(jobId);
    const declared = await this.options.ports.upstream(job, port);
    if (declared) return declared;
    const undeclared = await this.options.target.undeclaredPort(job, port);
    if (typeof undeclared === 'string') throw new Error(undeclared);
    return undeclared;
  }
}
