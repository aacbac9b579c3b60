import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import Router from '@koa/router';
import Koa from 'koa';
import { createLogger } from 'winston';
import type { AgentHealth, AgentMetrics, JobStatus } from '../../api/agent.js';
import type { GpuInfo } from '../../api/offer.js';
import { bearerAuth, bearerCheck } from '../../agent/auth.js';
import { errorResponses, HttpError } from '../../agent/http-errors.js';
import { readJsonBody } from '../../agent/json-body.js';
import { agentCredential } from '../../agent/port-forward.js';
import { answerLogsPage, logsQuery } from '../../agent/logs-page.js';
import { HISTORY_INTERVAL_MS, HISTORY_KEPT_MS } from '../../agent/metrics-history.js';
import { parseStopRequest, parseSubmission } from '../../agent/requests.js';
import { generateEd25519KeyPair } from '../../agent/ssh/key-pair.js';
import { agentVersion } from '../../agent/version.js';
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
  authorized: (credential: string | undefined) => boolean;
  /** Ends the agent's process as `how` says. */
  exit: (how: string) => void;
}

export const DEFAULT_SIMULATED_TIMINGS: SimulatedTimings = { startMs: 50, stopMs: 100 };
export const DEFAULT_SIMULATED_LOG_LINES = 1000;

/**
 * The agents of many emulated instances, simulated in this process: one HTTP server answers each instance's agent
 * API under `/instances/<id>`, so that an instance's `agent_url` is an ordinary base URL for the agent's client.
 * Jobs are played by timers (simulated-job.ts), not run; port forwards answer for a running job's declared ports.
 */
export class SimulatedAgents {
  /** Called each time the server asks a job's status, with how long it was since it last asked (null the first time). */
  onJobAsked: (job: SimulatedJob, sinceLastMs: number | null) => void = () => {};
  private readonly agents = new Map<string, Simulated>();
  private readonly hostKey = publicHostKey();

  private constructor(private readonly options: SimulatedAgentsOptions, private readonly server: Server, private readonly baseUrl: string) {}

  static async start(options: SimulatedAgentsOptions): Promise<SimulatedAgents> {
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, options.host, () => resolve());
    });
    const { port } = server.address() as AddressInfo;
    const host = options.host.includes(':') ? `[${options.host}]` : options.host;
    const agents = new SimulatedAgents(options, server, `http://${host}:${port}`);
    agents.serve();
    return agents;
  }

  /** Boots the agent of an instance: from now its API answers at the returned URL. */
  launch(machine: SimulatedMachine): { agent: AgentProcess; url: string } {
    let exit: (how: string) => void = () => {};
    const exited = new Promise<string>((resolve) => { exit = resolve; });
    const simulated: Simulated = {
      machine, jobs: new Map(), authorized: bearerCheck(machine.token),
      exit: (how) => {
        if (this.agents.get(machine.instanceId) !== simulated) return;
        this.agents.delete(machine.instanceId);
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
    return { agent, url: `${this.baseUrl}/instances/${machine.instanceId}` };
  }

  /** Every job of every agent still up. */
  jobs(): SimulatedJob[] {
    return [...this.agents.values()].flatMap((agent) => [...agent.jobs.values()]);
  }

  async close(): Promise<void> {
    for (const agent of [...this.agents.values()]) agent.exit('code 0');
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
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
      const { jobs } = ctx.state.agent;
      const known = jobs.get(submission.jobId);
      if (known) {
        ctx.body = answer(known.status);
        return;
      }
      const started = new SimulatedJob({
        ...submission,
        ...(submission.servicePort === undefined ? {} : { env: { ...submission.env, PORT: String(submission.servicePort) } }),
      }, this.options.timings, this.options.maxLogLines);
      jobs.set(submission.jobId, started);
      ctx.status = 201;
      ctx.body = answer(started.status);
    });
    router.get('/jobs/:id', (ctx) => {
      const found = job(ctx.state.agent, ctx.params.id!);
      const now = Date.now();
      this.onJobAsked(found, found.lastAskedAt === null ? null : now - found.lastAskedAt);
      found.lastAskedAt = now;
      ctx.body = answer(found.status);
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
      ctx.status = 204;
    });
    app.use(async (ctx, next) => {
      const forward = /^\/instances\/[^/]+\/api\/jobs\/([^/]+)\/ports\/(\d+)(\/.*)?$/.exec(ctx.path);
      if (!forward) return next();
      const [, id, port, path] = forward;
      const found = job(ctx.state.agent, decodeURIComponent(id!));
      if (found.status.state !== 'running') throw new HttpError(409, 'job_not_running', `job ${found.status.jobId} is ${found.status.state}, not running`);
      const { ports, servicePort } = found.submission;
      if (!ports.includes(Number(port)) && servicePort !== Number(port)) throw new HttpError(404, 'port_not_declared', `job ${found.status.jobId} did not declare port ${port}`);
      // What the job's server answers: a simulated one answers every request.
      ctx.body = { simulated: true, job: found.status.jobId, port: Number(port), path: path ?? '/' };
    });
    app.use(router.routes());
    app.use(router.allowedMethods());
    const api = app.callback();
    this.server.on('request', (req, res) => void api(req, res));
    // SSH and WebSocket tunnels need a process behind them; a simulated agent refuses them.
    this.server.on('upgrade', (_req, socket) => {
      socket.end('HTTP/1.1 501 Not Implemented\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    });
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

function publicHostKey(): string {
  return generateEd25519KeyPair().public;
}
