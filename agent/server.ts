import { mkdirSync, mkdtempSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import Koa from 'koa';
import type { Logger } from 'winston';
import { KEEP_ALIVE_SERVER_OPTIONS } from '../api/keep-alive.js';
import type { GpuInfo } from '../api/offer.js';
import { bearerAuth, bearerCheck } from './auth.js';
import { configuredDockerHost, dockerAnswers, dockerClient } from './docker-connection.js';
import { DockerRuntime } from './docker-runtime.js';
import { detectGpus, parseGpuSpec } from './gpu.js';
import { errorResponses } from './http-errors.js';
import { removeInstanceContainers } from './instance-containers.js';
import { DEFAULT_MAX_LOG_BYTES } from './job-log.js';
import { JobManager } from './jobs.js';
import { createAgentLogger } from './logger.js';
import { MetricsSampler } from './metrics.js';
import { MetricsHistory } from './metrics-history.js';
import { OrphanWatch } from './orphan-watch.js';
import { agentCredential, DEFAULT_FIRST_BYTE_TIMEOUT_MS, DockerJobPorts, PortForward, ProcessJobPorts } from './port-forward.js';
import { ProcessRuntime } from './process-runtime.js';
import { agentRoutes } from './routes.js';
import type { JobRuntime } from './runtime.js';
import { DockerTarget } from './ssh/docker-target.js';
import { loadOrCreateHostKey } from './ssh/host-key.js';
import type { JobTarget } from './ssh/job-target.js';
import { ProcessTarget } from './ssh/process-target.js';
import { SshAccess } from './ssh/ssh-access.js';
import { agentVersion } from './version.js';

export type RuntimeChoice = 'auto' | 'docker' | 'process';
export const RUNTIME_CHOICES: readonly RuntimeChoice[] = ['auto', 'docker', 'process'];

export interface AgentOptions {
  /** Every request must carry it as `Authorization: Bearer <token>`, or in `x-agent-authorization` (port forwards, Kubernetes' pod proxy). */
  token: string;
  /** Listen address, also the address published container ports bind to. Default 127.0.0.1. */
  host?: string;
  /** Default 0: any free port. */
  port?: number;
  /** auto: docker when a Docker Engine API answers at `dockerHost`, else process. */
  runtime?: RuntimeChoice;
  /** GPUs to report, e.g. "H100:80GB:2"; absent: detected with nvidia-smi. */
  gpu?: string;
  /** Default: the machine's host name. Containers carry it so a restarted agent finds its own. */
  instanceId?: string;
  /** Where job files and the agent's log go. Default: a new temporary directory. */
  workDir?: string;
  /** Default: DOCKER_HOST, else unix:///var/run/docker.sock. */
  dockerHost?: string;
  /** Also log to stderr (the command does; in-process users usually do not). */
  logToStderr?: boolean;
  /**
   * Seconds without any authenticated request after which the agent ends itself once no job is left
   * unfinished: no server will come back for it. Default 3600; 0 never.
   */
  orphanTimeoutSeconds?: number;
  /** A directory (the local backend's instance folder) whose removal ends the agent at once, jobs and all. */
  exitWhenMissing?: string;
  /** Bytes of log one job keeps on disk; past it the oldest part is removed. Default DEFAULT_MAX_LOG_BYTES. */
  maxLogBytes?: number;
  /** How long a job's port may take to start answering a forwarded request. Default DEFAULT_FIRST_BYTE_TIMEOUT_MS. */
  portFirstByteTimeoutMs?: number;
}

export const DEFAULT_ORPHAN_TIMEOUT_SECONDS = 3600;

export interface RunningAgent {
  url: string;
  runtime: 'docker' | 'process';
  workDir: string;
  logger: Logger;
  /** Stops serving. Process jobs are killed; containers keep running for the next agent to re-attach. */
  close(): Promise<void>;
  /**
   * Resolves with the reason once the agent has ended itself because no server will come back for it
   * (see `orphanTimeoutSeconds`, `exitWhenMissing`): it stopped serving, killed its jobs and removed its containers.
   */
  endedItself: Promise<string>;
}

type Settings = Required<Omit<AgentOptions, 'gpu' | 'workDir' | 'logToStderr' | 'exitWhenMissing'>>;

function validated(options: AgentOptions): Settings {
  if (typeof options.token !== 'string' || options.token.length === 0) throw new Error('an agent token is required');
  const port = options.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`invalid port ${options.port}: expected 0-65535`);
  const runtime = options.runtime ?? 'auto';
  if (!RUNTIME_CHOICES.includes(runtime)) throw new Error(`invalid runtime "${runtime}": expected ${RUNTIME_CHOICES.join(', ')}`);
  const instanceId = options.instanceId ?? hostname();
  if (instanceId.length === 0) throw new Error('the instance id must not be empty');
  return {
    token: options.token,
    host: options.host ?? '127.0.0.1',
    port,
    runtime,
    instanceId,
    dockerHost: options.dockerHost ?? configuredDockerHost(),
    orphanTimeoutSeconds: options.orphanTimeoutSeconds ?? DEFAULT_ORPHAN_TIMEOUT_SECONDS,
    maxLogBytes: options.maxLogBytes ?? DEFAULT_MAX_LOG_BYTES,
    portFirstByteTimeoutMs: options.portFirstByteTimeoutMs ?? DEFAULT_FIRST_BYTE_TIMEOUT_MS,
  };
}

/** Starts an agent in this process: its HTTP API on host:port, jobs on the chosen runtime. */
export async function startAgent(options: AgentOptions): Promise<RunningAgent> {
  const settings = validated(options);
  const declaredGpu = options.gpu === undefined ? null : parseGpuSpec(options.gpu);
  const workDir = resolve(options.workDir ?? mkdtempSync(join(tmpdir(), 'orchestrator-agent-')));
  mkdirSync(workDir, { recursive: true });
  const logger = createAgentLogger({ file: join(workDir, 'agent.log'), stderr: options.logToStderr ?? false });
  try {
    return await serve(settings, declaredGpu, workDir, options.exitWhenMissing, logger);
  } catch (error) {
    logger.error('agent could not start', { error: (error as Error).message });
    logger.close();
    throw error;
  }
}

async function serve(
  settings: Settings, declaredGpu: GpuInfo | null, workDir: string, exitWhenMissing: string | undefined, logger: Logger,
): Promise<RunningAgent> {
  const detectedGpu = await detectGpus();
  const gpu = declaredGpu ?? detectedGpu;
  const engineAnswers = settings.runtime !== 'process' && await dockerAnswers(settings.dockerHost);
  if (settings.runtime === 'docker' && !engineAnswers) {
    throw new Error(`no Docker Engine API answers at ${settings.dockerHost}`);
  }
  const docker = engineAnswers ? dockerClient(settings.dockerHost) : null;
  let runtime: JobRuntime;
  let sshTarget: JobTarget;
  if (docker) {
    runtime = new DockerRuntime({
      docker,
      instanceId: settings.instanceId,
      portHost: settings.host,
      gpus: detectedGpu.count > 0,
      logger,
    });
    sshTarget = new DockerTarget(docker, settings.instanceId);
  } else {
    const processRuntime = new ProcessRuntime();
    runtime = processRuntime;
    sshTarget = new ProcessTarget(processRuntime);
  }
  const hostKey = loadOrCreateHostKey(workDir);

  const jobs = new JobManager(runtime, workDir, logger, settings.maxLogBytes);
  const orphanWatch = new OrphanWatch({
    orphanTimeoutSeconds: settings.orphanTimeoutSeconds,
    exitWhenMissing: exitWhenMissing === undefined ? undefined : resolve(exitWhenMissing),
    busy: () => jobs.hasUnfinishedJobs(),
  });
  await jobs.recover();

  const authorized = bearerCheck(settings.token);
  const ports = docker ? new DockerJobPorts(docker, settings.instanceId) : new ProcessJobPorts(logger);
  const portForward = new PortForward({
    jobs, ports, authorized, contact: () => orphanWatch.contact(), firstByteTimeoutMs: settings.portFirstByteTimeoutMs, logger,
  });
  const ssh = new SshAccess({ jobs, ports, target: sshTarget, hostKey, authorized, logger });

  const metrics = new MetricsSampler(gpu, workDir);
  const history = new MetricsHistory();
  history.start(() => metrics.sample(), () => jobs.hasUnfinishedJobs(), (error) => logger.warn('could not sample the metrics', { error: error.message }));

  const app = new Koa();
  app.on('error', (error: Error) => logger.warn('connection error', { error: error.message }));
  const router = agentRoutes({
    jobs,
    metrics,
    history,
    ports,
    portForward,
    ssh,
    identity: { version: agentVersion(), instanceId: settings.instanceId, runtime: runtime.kind, gpu, sshHostKey: hostKey.publicKey },
  });
  app.use(errorResponses(logger));
  app.use(bearerAuth(authorized, agentCredential));
  app.use(async (_ctx, next) => {
    orphanWatch.contact();
    await next();
  });
  app.use(router.routes());
  app.use(router.allowedMethods());

  const api = app.callback();
  const server = createServer(KEEP_ALIVE_SERVER_OPTIONS, (req, res) => void (PortForward.handles(req.url) ? portForward.web(req, res) : api(req, res)));
  server.on('upgrade', (req, socket, head) => {
    if (SshAccess.handles(req.url)) ssh.upgrade(req, socket, head);
    else portForward.upgrade(req, socket, head);
  });
  try {
    await new Promise<void>((resolveListen, rejectListen) => {
      server.once('error', rejectListen);
      server.listen(settings.port, settings.host, () => {
        server.off('error', rejectListen);
        resolveListen();
      });
    });
  } catch (error) {
    history.stop();
    await jobs.close();
    throw error;
  }
  const { port } = server.address() as AddressInfo;
  const url = `http://${settings.host.includes(':') ? `[${settings.host}]` : settings.host}:${port}`;
  logger.info('agent listening', {
    url, runtime: runtime.kind, instanceId: settings.instanceId, gpu, workDir,
    orphanTimeoutSeconds: settings.orphanTimeoutSeconds, exitWhenMissing,
  });

  let closed: Promise<void> | null = null;
  /** `forGood`: no agent will take over, so the instance's containers go too instead of waiting for one. */
  const stop = (forGood: boolean) => {
    closed ??= (async () => {
      orphanWatch.stop();
      history.stop();
      portForward.close();
      ssh.close();
      await new Promise<void>((resolveClose) => {
        server.close(() => resolveClose());
        server.closeAllConnections();
      });
      await jobs.close();
      if (forGood && runtime.kind === 'docker') {
        await removeInstanceContainers(settings.instanceId, settings.dockerHost).catch((error: Error) => {
          logger.error('could not remove the instance\'s containers', { error: error.message });
        });
      }
      logger.info('agent stopped');
      await closeLogger(logger);
    })();
    return closed;
  };
  const endedItself = new Promise<string>((resolveEnded) => {
    orphanWatch.start((reason) => {
      logger.warn('agent ending itself', { reason });
      stop(true)
        .catch((error: Error) => logger.error('could not stop cleanly', { error: error.message }))
        .finally(() => resolveEnded(reason));
    });
  });
  return { url, runtime: runtime.kind, workDir, logger, close: () => stop(false), endedItself };
}

/** Closes the logger once its transports have written everything: a process that exits next keeps its last lines. */
async function closeLogger(logger: Logger): Promise<void> {
  const written = Promise.all(logger.transports.map((transport) => new Promise((done) => transport.once('finish', done))));
  // A line logged after this is dropped, as after close(), instead of failing as a write after end.
  logger.on('error', () => undefined);
  logger.end();
  await written;
  logger.close();
}
