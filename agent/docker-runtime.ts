import type Docker from 'dockerode';
import { spawn } from 'node:child_process';
import { createReadStream } from 'node:fs';
import { mkdir, readdir, realpath } from 'node:fs/promises';
import { join, posix } from 'node:path';
import type { Readable } from 'node:stream';
import type { Logger } from 'winston';
import type { JobRepo, JobSubmission, JobVolume } from '../api/agent.js';
import { DEFAULT_SHELL } from '../api/run-container.js';
import { isDirectory, missingVolumeMessage } from './job-inputs.js';
import { checkoutRepo, reposToPlace } from './repos.js';
import type { JobLog } from './job-log.js';
import { DockerLogReader } from './docker-logs.js';
import { confinedDirectory, containerFilePath, fileMode } from './job-files.js';
import {
  JobStartError, jobCommandLine, jobEnvironment,
  type JobContext, type JobExecution, type JobExit, type JobRuntime, type RecoveredJob, type StopSignal,
} from './runtime.js';
import { createTar } from './tar.js';

/** The image of jobs that name none: Python, uv and CUDA (docker/base/Dockerfile). */
export const DEFAULT_IMAGE = 'orchestrator/base:cuda-12.8';
export const DEFAULT_CONTAINER_WORKING_DIR = '/workflow';
export const LABELS = {
  jobId: 'orchestrator.job-id',
  runName: 'orchestrator.run-name',
  instanceId: 'orchestrator.instance-id',
} as const;

/** Where a job's virtual environment is made (JobSubmission.venvPython), as dstack makes its own at /dstack/venv. */
export const VENV_DIR = '/orchestrator/venv';

/** Makes a virtual environment of that Python with uv (pip seeded into it, as in dstack) and activates it for the commands after. */
function venvCommands(python: string): string[] {
  return [`uv venv -q --prompt orchestrator --python ${python} --seed ${VENV_DIR}`, `. ${VENV_DIR}/bin/activate`];
}

/** How long the log stream may lag behind the container's exit before it is cut. */
const LOG_DRAIN_MS = 3000;

export interface DockerRuntimeOptions {
  docker: Docker;
  instanceId: string;
  /** The address published ports bind to on this machine (the agent's own listen address). */
  portHost: string;
  /** Whether the machine has NVIDIA GPUs to hand to jobs that ask for them. */
  gpus: boolean;
  logger: Logger;
}

/** Runs each job in a container through the Docker Engine API (Docker or Podman). */
export class DockerRuntime implements JobRuntime {
  readonly kind = 'docker' as const;
  private readonly follows = new Set<AbortController>();

  constructor(private readonly options: DockerRuntimeOptions) {}

  async start(context: JobContext): Promise<JobExecution> {
    const { submission } = context;
    const { docker } = this.options;
    const image = submission.image ?? DEFAULT_IMAGE;
    await this.ensureImage(image, submission.registryAuth, context);
    if (context.cancelled()) throw new JobStartError('stopped before it started');
    const binds = await volumeBinds(submission.volumes ?? []);
    const workingDir = posix.resolve(DEFAULT_CONTAINER_WORKING_DIR, submission.workingDir ?? '.');
    let container: Docker.Container;
    try {
      container = await docker.createContainer(this.containerSpec(submission, image, workingDir, binds));
    } catch (error) {
      throw new JobStartError(`could not create the container: ${engineMessage(error)}`);
    }
    try {
      await requireShell(container, submission, image);
      let reposArchive: string | null;
      try {
        reposArchive = await stageRepos(context.dir, await reposToPlace(submission.repos ?? [], (path) => holdsFiles(container, path)));
      } catch (error) {
        throw new JobStartError(`could not put the repos in place: ${(error as Error).message}`);
      }
      if (context.cancelled()) throw new JobStartError('stopped before it started');
      if (reposArchive !== null) await container.putArchive(createReadStream(reposArchive), { path: '/' });
      if (submission.files.length > 0) {
        const archive = createTar(submission.files.map((file) => ({
          path: containerFilePath(workingDir, file),
          content: Buffer.from(file.contentBase64, 'base64'),
          mode: fileMode(file),
        })));
        await container.putArchive(archive, { path: '/' });
      }
      if (context.cancelled()) throw new JobStartError('stopped before it started');
      await container.start();
    } catch (error) {
      await container.remove({ force: true }).catch(() => undefined);
      throw error instanceof JobStartError ? error : new JobStartError(`could not start the container: ${engineMessage(error)}`);
    }
    return this.follow(container, context.log, new Date().toISOString());
  }

  async recover(openLog: (jobId: string) => JobLog): Promise<RecoveredJob[]> {
    const { docker, instanceId, logger } = this.options;
    const containers = await docker.listContainers({ all: true, filters: { label: [`${LABELS.instanceId}=${instanceId}`] } });
    const recovered: RecoveredJob[] = [];
    const seen = new Set<string>();
    for (const info of containers) {
      const jobId = info.Labels[LABELS.jobId];
      if (!jobId || seen.has(jobId)) continue;
      const container = docker.getContainer(info.Id);
      if (info.State === 'created' || info.State === 'configured') {
        // Never started: its files may be missing. Removing it lets a resubmission start the job afresh.
        logger.info('removing a container that was created but never started', { jobId, container: info.Id });
        await container.remove({ force: true }).catch(() => undefined);
        continue;
      }
      seen.add(jobId);
      const details = await container.inspect();
      const startedAt = engineTime(details.State.StartedAt) ?? new Date().toISOString();
      logger.info('re-attached to a container', { jobId, container: info.Id, state: info.State });
      recovered.push({ jobId, execution: this.follow(container, openLog(jobId), startedAt) });
    }
    return recovered;
  }

  async remove(jobId: string): Promise<void> {
    const { docker, instanceId } = this.options;
    const containers = await docker.listContainers({
      all: true,
      filters: { label: [`${LABELS.instanceId}=${instanceId}`, `${LABELS.jobId}=${jobId}`] },
    });
    for (const info of containers) {
      await docker.getContainer(info.Id).remove({ force: true }).catch((error: unknown) => {
        if (statusCode(error) !== 404) throw error;
      });
    }
  }

  async shutdown(): Promise<void> {
    for (const follow of this.follows) follow.abort();
    this.follows.clear();
  }

  private containerSpec(submission: JobSubmission, image: string, workingDir: string, binds: string[]): Docker.ContainerCreateOptions {
    const { instanceId, portHost, gpus } = this.options;
    const ports = submission.ports.map((port) => `${port}/tcp`);
    const commandLine = jobCommandLine(submission.venvPython === undefined ? submission : { ...submission, commands: [...venvCommands(submission.venvPython), ...submission.commands] });
    return {
      Image: image,
      // The whole command line as the entrypoint, with no command after it: the image's own entrypoint would otherwise wrap it.
      ...(commandLine === null ? {} : { Entrypoint: commandLine, Cmd: [] }),
      Env: Object.entries(containerEnvironment(submission, gpus)).map(([name, value]) => `${name}=${value}`),
      WorkingDir: workingDir,
      Labels: {
        [LABELS.jobId]: submission.jobId,
        [LABELS.runName]: submission.runName,
        [LABELS.instanceId]: instanceId,
      },
      ExposedPorts: Object.fromEntries(ports.map((port) => [port, {}])),
      HostConfig: {
        Binds: binds.length > 0 ? binds : undefined,
        Privileged: submission.privileged ?? false,
        ShmSize: submission.shmSizeMib === undefined ? undefined : Math.round(submission.shmSizeMib * 1024 * 1024),
        PortBindings: Object.fromEntries(ports.map((port) => [port, [{ HostIp: portHost, HostPort: port.split('/')[0] }]])),
        DeviceRequests: gpus && submission.gpus > 0
          ? [{ Driver: 'nvidia', ...(submission.gpuIndices ? { DeviceIDs: submission.gpuIndices.map(String) } : { Count: submission.gpus }), Capabilities: [['gpu']] }]
          : undefined,
      },
    };
  }

  private async ensureImage(image: string, auth: JobSubmission['registryAuth'], context: JobContext): Promise<void> {
    if (await this.imagePresent(image)) return;
    context.pulling();
    const { docker } = this.options;
    const registry = registryOf(image);
    let failure: string | null = null;
    try {
      const progress = await docker.pull(image, auth ? { authconfig: { ...auth, serveraddress: registry } } : {});
      await new Promise<void>((resolve, reject) => {
        docker.modem.followProgress(
          progress,
          (error: Error | null) => (error ? reject(error) : resolve()),
          (event: { error?: string }) => { if (event.error) failure = event.error; },
        );
      });
    } catch (error) {
      failure = engineMessage(error);
    }
    if (failure === null && await this.imagePresent(image)) return;
    const as = auth ? ` as ${auth.username}` : '';
    throw new JobStartError(`could not pull image ${image} from registry ${registry}${as}: ${failure ?? 'the engine reported success but has no such image'}`);
  }

  private async imagePresent(image: string): Promise<boolean> {
    try {
      await this.options.docker.getImage(image).inspect();
      return true;
    } catch (error) {
      if (statusCode(error) === 404) return false;
      throw new JobStartError(`could not inspect image ${image}: ${engineMessage(error)}`);
    }
  }

  /** Follows a started (or already finished) container: its whole log from the start, then its exit. */
  private follow(container: Docker.Container, log: JobLog, startedAt: string): JobExecution {
    const controller = new AbortController();
    this.follows.add(controller);
    const reader = new DockerLogReader(log);
    const output = (async () => {
      const stream = await container.logs({ follow: true, stdout: true, stderr: true, timestamps: true, abortSignal: controller.signal });
      await new Promise<void>((resolve, reject) => {
        stream.on('data', (chunk: Buffer) => reader.push(chunk));
        stream.once('end', resolve);
        stream.once('close', resolve);
        stream.once('error', reject);
      });
    })();
    const exited = (async (): Promise<JobExit> => {
      const result = await container.wait({ abortSignal: controller.signal }) as { StatusCode?: number };
      const drained = await settlesWithin(output, LOG_DRAIN_MS, controller.signal);
      if (controller.signal.aborted) throw new Error('the agent stopped following the container');
      if (!drained) {
        this.options.logger.warn('the container log did not end with the container; reading its tail again', { container: container.id });
      }
      controller.abort();
      this.follows.delete(controller);
      // Podman's follow stream can end with its container before the last lines reached it (a short job's last line).
      const tail = await container.logs({ follow: false, stdout: true, stderr: true, timestamps: true, since: reader.resumeSince }).catch(() => null);
      if (tail) reader.catchUp(tail);
      const details = await container.inspect().catch(() => null);
      return {
        exitCode: result.StatusCode ?? details?.State.ExitCode ?? null,
        finishedAt: engineTime(details?.State.FinishedAt) ?? new Date().toISOString(),
      };
    })();
    output.catch(() => undefined);
    return {
      startedAt,
      exited,
      kill: async (signal: StopSignal) => {
        await container.kill({ signal }).catch((error: unknown) => {
          if (statusCode(error) !== 404 && statusCode(error) !== 409) throw error;
        });
      },
    };
  }
}

/**
 * The registry an image reference names: its first part when that looks like a host (a dot, a port or
 * localhost), else Docker Hub, as the engines read it.
 */
export function registryOf(image: string): string {
  const slash = image.indexOf('/');
  const first = slash < 0 ? '' : image.slice(0, slash);
  return first.includes('.') || first.includes(':') || first === 'localhost' ? first : 'docker.io';
}

/**
 * Fails the job, saying why, when its commands go to a shell that its image lacks (`shell: bash` on an image
 * without bash), which the engine would only report as an OCI error when the container starts.
 */
async function requireShell(container: Docker.Container, submission: JobSubmission, image: string): Promise<void> {
  if (submission.entrypoint || submission.commands.length === 0) return;
  const shell = submission.shell ?? DEFAULT_SHELL;
  const missing = await container.infoArchive({ path: shell }).then(() => false, (error: unknown) => statusCode(error) === 404);
  if (missing) {
    throw new JobStartError(`the image ${image} has no ${shell}, the run's shell; use an image that has it, or another shell`);
  }
}

/** The engine's bind mounts of the volumes; a missing instance directory fails the job unless the volume is optional. */
async function volumeBinds(volumes: readonly JobVolume[]): Promise<string[]> {
  const binds: string[] = [];
  for (const volume of volumes) {
    if (await isDirectory(volume.instancePath)) binds.push(`${volume.instancePath}:${volume.path}`);
    else if (!volume.optional) throw new JobStartError(missingVolumeMessage(volume));
  }
  return binds;
}

/** A container given some of the GPUs sees those alone, numbered from 0, so its CUDA_VISIBLE_DEVICES counts from 0 too. */
function containerEnvironment(submission: JobSubmission, gpus: boolean): Record<string, string> {
  const environment = jobEnvironment(submission);
  if (gpus && submission.gpuIndices) environment.CUDA_VISIBLE_DEVICES = submission.gpuIndices.map((_, index) => index).join(',');
  return environment;
}

/**
 * Whether the container (its image, before it starts) has anything at `path`: a file, or a directory that is not
 * empty. The engine's archive of an empty directory is the directory's own tar header and then the end.
 */
async function holdsFiles(container: Docker.Container, path: string): Promise<boolean> {
  let archive: NodeJS.ReadableStream;
  try {
    archive = await container.getArchive({ path });
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 404) return false;
    throw new Error(`could not look at ${path} in the image: ${engineMessage(error)}`);
  }
  const head = await firstBytes(archive as Readable, 2 * TAR_BLOCK);
  return head.length === 2 * TAR_BLOCK && head.subarray(TAR_BLOCK).some((byte) => byte !== 0);
}

const TAR_BLOCK = 512;

/** Up to `count` bytes from the start of `stream`, which is then destroyed. */
function firstBytes(stream: Readable, count: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const done = () => {
      stream.destroy();
      resolve(Buffer.concat(chunks).subarray(0, count));
    };
    stream.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      length += chunk.length;
      if (length >= count) done();
    });
    stream.once('end', done);
    stream.once('error', reject);
  });
}

/**
 * Checks the repos out on this machine under `<dir>/repos`, each at its container path, and tars them for
 * the engine's archive API (which resolves every path inside the container). Null when there are none.
 */
async function stageRepos(dir: string, repos: readonly JobRepo[]): Promise<string | null> {
  if (repos.length === 0) return null;
  const stage = join(dir, 'repos');
  await mkdir(stage, { recursive: true });
  const realStage = await realpath(stage);
  for (const repo of [...repos].sort((a, b) => a.path.length - b.path.length)) {
    await checkoutRepo(repo, await confinedDirectory(realStage, posix.normalize(repo.path).slice(1), repo.path));
  }
  const archive = join(dir, 'repos.tar');
  await runTar(['-C', realStage, '-c', '--owner=0', '--group=0', '--numeric-owner', '-f', archive, ...(await readdir(realStage))]);
  return archive;
}

function runTar(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('tar', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    child.once('error', reject);
    child.once('close', (code) => (code === 0 ? resolve() : reject(new Error(`tar failed: ${stderr.trim()}`))));
  });
}

/** True when `promise` settles within `ms`; false on timeout or once `signal` aborts. */
function settlesWithin(promise: Promise<unknown>, ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const finish = (settled: boolean) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', aborted);
      resolve(settled);
    };
    const aborted = () => finish(false);
    const timer = setTimeout(finish, ms, false);
    signal.addEventListener('abort', aborted, { once: true });
    promise.then(() => finish(true), () => finish(false));
  });
}

function statusCode(error: unknown): number | undefined {
  return (error as { statusCode?: number }).statusCode;
}

function engineMessage(error: unknown): string {
  const json = (error as { json?: { message?: string } }).json;
  return json?.message ?? (error as Error).message ?? String(error);
}

/** An engine timestamp as ISO 8601, or null for the zero time engines use for "never". */
function engineTime(value: string | undefined): string | null {
  if (!value) return null;
  const time = new Date(value);
  return Number.isNaN(time.getTime()) || time.getUTCFullYear() < 1970 ? null : time.toISOString();
}
