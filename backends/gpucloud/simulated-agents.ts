import { createServer, type IncomingMessage, type Server } from 'node:http';
import { createServer as createListener, type AddressInfo, type Socket } from 'node:net';
import Router from '@koa/router';
import Koa from 'koa';
import { createLogger } from 'winston';
import { AGENT_TUNNEL_PROTOCOL, type AgentHealth, type AgentMetrics, type JobStatus } from '../../api/agent.js';
import { KEEP_ALIVE_SERVER_OPTIONS } from '../../api/keep-alive.js';
import type { GpuInfo } from '../../api/offer.js';
import { bearerAuth, bearerCheck } from '../../agent/auth.js';
import { errorResponses, HttpError } from '../../agent/http-errors.js';
import { readJsonBody } from '../../agent/json-body.js';
import { agentCredential, refuseUpgrade } from '../../agent/port-forward.js';
import { answerLogsPage, logsQuery } from '../../agent/logs-page.js';
import { HISTORY_INTERVAL_MS, HISTORY_KEPT_MS } from '../../agent/metrics-history.js';
import { jobsChangesAnswer } from '../../agent/jobs-changes.js';
import { jobsWatchAnswer } from '../../agent/jobs-watch.js';
import { parseJobsChanges, parseJobsWatch, parseStopRequest, parseSubmission } from '../../agent/requests.js';
import { generateEd25519KeyPair } from '../../agent/ssh/key-pair.js';
import { agentVersion } from '../../agent/version.js';
import { Waiters } from '../../agent/waiters.js';
import type { AgentProcess } from './agent-process.js';
import { SimulatedJob, type SimulatedTimings } from './simulated-job.js';

export interface SimulatedAgentsOptions {
  host: string;
  timings: SimulatedTimings;
  /** Entries each job keeps; older ones are dropped as the agent's log rotation drops them. */
  maxLogLines: number;
  /** What every GPU reports as its utilisation (the emulator's fault), 0 when null. */
  gpuUtilization: () => number | null;
}

export interface SimulatedMachine {
  instanceId: string;
  token: string;
  gpu: GpuInfo;
  memoryMib: number;
}

interface Simulated {
  machine: SimulatedMachine;
  jobs: Map<string, SimulatedJob>;
  /** Woken whenever one of its jobs changes state or is removed. */
  stateChanges: Waiters;
  authorized: (credential: string | undefined) => boolean;
  /** Settles once its port is closed and every connection it accepted has ended. */
  closed: Promise<unknown>;
  /** Ends the agent's process as `how` says. */
  exit: (how: string) => void;
  /** Settles once it has ended. */
  exited: Promise<string>;
}

export const DEFAULT_SIMULATED_TIMINGS: SimulatedTimings = { startMs: 50, stopMs: 100 };
export const DEFAULT_SIMULATED_LOG_LINES = 1000;

/**
 * The agents of many emulated instances, simulated in this process: each listens on a port of its own, as real agents
 * do (a server's HTTP client then keeps a pool of connections per agent, as it does with real ones, not one pool for
 * them all), and one HTTP server answers them all, each instance's agent API under `/instances/<id>`, so that an
 * instance's `agent_url` is an ordinary base URL for the agent's client.
 * Jobs are played by timers (simulated-job.ts), not run; port forwards answer for a running job's declared ports.
 */
export class SimulatedAgents {
  /** Called each time the server asks a job's status, with how long it was since it last asked (null the first time). */
  onJobAsked: (job: SimulatedJob, sinceLastMs: number | null) => void = () => {};
  /** Answer as agents older than `POST /api/jobs/watch` do (405), to try a server against an older fleet. */
  olderAgents = false;
  /** Answer as agents older than `POST /api/jobs/changes` do (405), which the server then looks at every second. */
  withoutChanges = false;
  /** Requests the agents' API has answered (port forwards not counted). */
  requests = 0;
  private readonly agents = new Map<string, Simulated>();
  private readonly hostKey = publicHostKey();
  /** The server answers the connections that the agents' listeners accept: those still open, ended at close. */
  private readonly server: Server = createServer(KEEP_ALIVE_SERVER_OPTIONS);
  private readonly connections = new Set<Socket>();

  private constructor(private readonly options: SimulatedAgentsOptions) {}

  static async start(options: SimulatedAgentsOptions): Promise<SimulatedAgents> {
    const agents = new SimulatedAgents(options);
    agents.serve();
    return agents;
  }

  /** Boots the agent of an instance: from now its API answers at the returned URL. */
  async launch(machine: SimulatedMachine): Promise<{ agent: AgentProcess; url: string }> {
    const listener = createListener((socket) => {
      this.connections.add(socket);
      socket.once('close', () => this.connections.delete(socket));
      this.server.emit('connection', socket);
    });
    await new Promise<void>((resolve, reject) => {
      listener.once('error', reject);
      listener.listen(0, this.options.host, () => resolve());
    });
    let exit: (how: string) => void = () => {};
    const exited = new Promise<string>((resolve) => { exit = resolve; });
    const simulated: Simulated = {
      machine, jobs: new Map(), stateChanges: new Waiters(), authorized: bearerCheck(machine.token), exited, closed: new Promise((resolve) => listener.once('close', resolve)),
      exit: (how) => {
        if (this.agents.get(machine.instanceId) !== simulated) return;
        this.agents.delete(machine.instanceId);
        listener.close();
        for (const job of simulated.jobs.values()) job.dispose();
        exit(how);
      },
    };
    this.agents.set(machine.instanceId, simulated);
    const agent: AgentProcess = {
      pid: null,
      startTime: null,
      exited,
      release: () => {},
      kill: () => simulated.exit('signal SIGKILL'),
      // The agent kills its process jobs as it stops, as the real one does on SIGTERM.
      stop: async () => simulated.exit('code 0'),
    };
    const { port } = listener.address() as AddressInfo;
    const host = this.options.host.includes(':') ? `[${this.options.host}]` : this.options.host;
    return { agent, url: `http://${host}:${port}/instances/${machine.instanceId}` };
  }

  /** Every job of every agent still up. */
  jobs(): SimulatedJob[] {
    return [...this.agents.values()].flatMap((agent) => [...agent.jobs.values()]);
  }

  async close(): Promise<void> {
    const agents = [...this.agents.values()];
    for (const agent of agents) agent.exit('code 0');
    for (const socket of this.connections) socket.destroy();
    await Promise.all(agents.map((agent) => agent.closed));
  }

  private serve(): void {
    const app = new Koa();
    const router = new Router<{ agent: Simulated }>({ prefix: '/instances/:instance/api' });
    const silent = createLogger({ silent: true });
    app.use(errorResponses(silent));
    app.use(async (ctx, next) => {
      const agent = this.agents.get(/^\/instances\/([^/]+)\//.exec(ctx.path)?.[1] ?? '');
      // No machine answers there: the connection fails, as it does for an agent that is not running.
      if (!agent) return void ctx.req.socket.destroy();
      ctx.state.agent = agent;
      this.requests += 1;
      await next();
    });
    app.use(async (ctx, next) => bearerAuth(ctx.state.agent.authorized, agentCredential)(ctx, next));
    const job = (agent: Simulated, id: string): SimulatedJob => {
      const found = agent.jobs.get(id);
      if (!found) throw new HttpError(404, 'job_not_found', `no job ${id}`);
      return found;
    };
    const answer = (status: JobStatus): JobStatus => ({ ...status, forwarding: 0 });

    router.get('/health', (ctx) => {
      const { machine, jobs } = ctx.state.agent;
      const health: AgentHealth = {
        ok: true, version: agentVersion(), instanceId: machine.instanceId, runtime: 'process', gpu: machine.gpu,
        jobs: [...jobs.keys()], sshHostKey: this.hostKey,
      };
      ctx.body = health;
    });
    router.get('/metrics', (ctx) => {
      ctx.body = this.metrics(ctx.state.agent);
    });
    router.get('/jobs/:id/metrics/history', (ctx) => {
      ctx.body = this.metricsHistory(ctx.state.agent, job(ctx.state.agent, ctx.params.id!).status);
    });
    router.post('/jobs', async (ctx) => {
      const submission = parseSubmission(await readJsonBody(ctx));
      const { jobs, stateChanges } = ctx.state.agent;
      const known = jobs.get(submission.jobId);
      if (known) {
        ctx.body = answer(known.status);
        return;
      }
      const started = new SimulatedJob({
        ...submission,
        ...(submission.servicePort === undefined ? {} : { env: { ...submission.env, PORT: String(submission.servicePort) } }),
      }, this.options.timings, this.options.maxLogLines, () => stateChanges.wakeAll());
      jobs.set(submission.jobId, started);
      ctx.status = 201;
      ctx.body = answer(started.status);
    });
    const asked = (found: SimulatedJob): SimulatedJob => {
      const now = Date.now();
      this.onJobAsked(found, found.lastAskedAt === null ? null : now - found.lastAskedAt);
      found.lastAskedAt = now;
      return found;
    };
    router.get('/jobs/:id', (ctx) => {
      ctx.body = answer(asked(job(ctx.state.agent, ctx.params.id!)).status);
    });
    router.post('/jobs/watch', async (ctx) => {
      if (this.olderAgents) throw new HttpError(405, 'method_not_allowed', 'Method Not Allowed');
      const request = parseJobsWatch(await readJsonBody(ctx));
      const { jobs } = ctx.state.agent;
      ctx.body = jobsWatchAnswer(request, (jobId) => {
        const found = jobs.get(jobId);
        return found && { status: answer(asked(found).status), page: (after, maxBytes) => found.page(after, maxBytes) };
      });
    });
    router.post('/jobs/changes', async (ctx) => {
      if (this.olderAgents || this.withoutChanges) throw new HttpError(405, 'method_not_allowed', 'Method Not Allowed');
      const request = parseJobsChanges(await readJsonBody(ctx));
      const { jobs, stateChanges, exited } = ctx.state.agent;
      const answer = await Promise.race([jobsChangesAnswer(request, (jobId) => jobs.get(jobId)?.status.state, stateChanges), exited.then(() => null)]);
      // An agent that ended meanwhile drops the connection, as a real agent's process does.
      if (!answer) return void ctx.req.socket.destroy();
      ctx.body = answer;
    });
    router.get('/jobs/:id/logs', async (ctx) => {
      const { after, wait } = logsQuery(ctx);
      answerLogsPage(ctx, await job(ctx.state.agent, ctx.params.id!).logs(after, wait));
    });
    router.post('/jobs/:id/stop', async (ctx) => {
      const request = parseStopRequest(await readJsonBody(ctx));
      const found = job(ctx.state.agent, ctx.params.id!);
      found.stop(request);
      ctx.body = answer(found.status);
    });
    router.delete('/jobs/:id', (ctx) => {
      const found = job(ctx.state.agent, ctx.params.id!);
      if (!found.finished) throw new HttpError(409, 'job_running', `job ${ctx.params.id} has not finished; stop it first`);
      found.dispose();
      ctx.state.agent.jobs.delete(ctx.params.id!);
      ctx.state.agent.stateChanges.wakeAll();
      ctx.status = 204;
    });
    app.use(async (ctx, next) => {
      const forward = forwardOf(ctx.path);
      if (!forward) return next();
      const { id, port, path } = forward;
      const found = this.forwarded(ctx.state.agent, id, port);
      ctx.body = jobServerAnswer(found, port, path);
    });
    app.use(router.routes());
    app.use(router.allowedMethods());
    const api = app.callback();
    this.server.on('request', (req, res) => void api(req, res));
    this.server.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => this.upgrade(req, socket, head));
  }

  /** The job a port forward reaches, once it is running and declared the port. */
  private forwarded(agent: Simulated, id: string, port: number): SimulatedJob {
    const found = agent.jobs.get(id);
    if (!found) throw new HttpError(404, 'job_not_found', `no job ${id}`);
    if (found.status.state !== 'running') throw new HttpError(409, 'job_not_running', `job ${found.status.jobId} is ${found.status.state}, not running`);
    const { ports, servicePort } = found.submission;
    if (!ports.includes(port) && servicePort !== port) throw new HttpError(404, 'port_not_declared', `job ${found.status.jobId} did not declare port ${port}`);
    return found;
  }

  /**
   * A byte tunnel to a job's port, as the real agent opens it for the proxy: checked once, then switched, and every
   * request over it answered by the job's simulated server. SSH and WebSocket tunnels need a process behind them; a
   * simulated agent refuses them.
   */
  private upgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const agent = this.agents.get(/^\/instances\/([^/]+)\//.exec(req.url ?? '')?.[1] ?? '');
    if (!agent) return void socket.destroy();
    const forward = forwardOf(new URL(req.url ?? '/', 'http://agent').pathname);
    if (req.headers.upgrade?.toLowerCase() !== AGENT_TUNNEL_PROTOCOL || !forward) {
      return void socket.end('HTTP/1.1 501 Not Implemented\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    }
    if (!agent.authorized(agentCredential(req))) {
      return refuseUpgrade(socket, new HttpError(401, 'unauthorized', 'a valid bearer token is required'), { 'WWW-Authenticate': 'Bearer' });
    }
    let found: SimulatedJob;
    try {
      found = this.forwarded(agent, forward.id, forward.port);
    } catch (error) {
      return refuseUpgrade(socket, error as HttpError);
    }
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${AGENT_TUNNEL_PROTOCOL}\r\n\r\n`);
    if (head.length > 0) socket.unshift(head);
    const jobServer = createServer((request, response) => {
      const body = JSON.stringify(jobServerAnswer(found, forward.port, new URL(request.url ?? '/', 'http://job').pathname));
      response.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
    });
    jobServer.emit('connection', socket);
  }

  /** What a real agent's background samples would hold for the job: one every 5 s while it ran, the last hour at most. */
  private metricsHistory(agent: Simulated, status: JobStatus): AgentMetrics[] {
    if (status.startedAt === null) return [];
    const end = status.finishedAt === null ? Date.now() : Date.parse(status.finishedAt);
    const start = Math.max(Date.parse(status.startedAt), end - HISTORY_KEPT_MS);
    const sample = this.metrics(agent);
    const samples: AgentMetrics[] = [];
    for (let at = start; at <= end; at += HISTORY_INTERVAL_MS) samples.push({ ...sample, ts: new Date(at).toISOString() });
    return samples;
  }

  private metrics(agent: Simulated): AgentMetrics {
    const running = [...agent.jobs.values()].filter((job) => job.status.state === 'running').length;
    const { gpu, memoryMib } = agent.machine;
    return {
      ts: new Date().toISOString(),
      cpuPercent: running > 0 ? 1 : 0,
      memoryUsedMib: Math.min(memoryMib, 512 * (1 + running)),
      memoryTotalMib: memoryMib,
      gpus: Array.from({ length: gpu.count }, (_, index) => ({
        index, name: gpu.name, utilizationPercent: this.options.gpuUtilization() ?? 0, memoryUsedMib: 0, memoryTotalMib: gpu.memoryMib,
      })),
    };
  }
}

function forwardOf(path: string): { id: string; port: number; path: string } | null {
  const forward = /^\/instances\/[^/]+\/api\/jobs\/([^/]+)\/ports\/(\d+)(\/.*)?$/.exec(path);
  return forward ? { id: decodeURIComponent(forward[1]!), port: Number(forward[2]), path: forward[3] ?? '/' } : null;
}

/** What the job's server answers: a simulated one answers every request. */
function jobServerAnswer(job: SimulatedJob, port: number, path: string): object {
  return { simulated: true, job: job.status.jobId, port, path };
}

function publicHostKey(): string {
  return generateEd25519KeyPair().public;
}
