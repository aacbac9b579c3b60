import type Docker from 'dockerode';
import { PassThrough, Writable } from 'node:stream';
import type { JobStatus } from '../../api/agent.js';
import { LABELS, VENV_DIR } from '../docker-runtime.js';
import type { Upstream } from '../port-forward.js';
import { execExitCode } from './container-exec.js';
import { ContainerFileStore } from './container-files.js';
import type { FileStore } from './file-store.js';
import { sessionCommandLine, type JobTarget, type SessionExit, type SessionProcess, type SessionRequest } from './job-target.js';

/** Signals an exec's process by the host PID the engine reports: possible where the agent runs beside the engine with the rights to. */
async function signalExec(exec: Docker.Exec, signal: NodeJS.Signals): Promise<boolean> {
  const { Pid } = await exec.inspect().catch(() => ({ Pid: 0 }));
  if (!Pid) return false;
  try {
    process.kill(Pid, signal);
    return true;
  } catch {
    return false;
  }
}

/**
 * Sessions of container jobs: Docker exec in the job's container, as the image's user, in its working directory, with its
 * environment, and in the virtual environment the job's commands ran in, where the agent made one (JobSubmission.venvPython).
 */
export class DockerTarget implements JobTarget {
  constructor(private readonly docker: Docker, private readonly instanceId: string) {}

  async start(job: JobStatus, request: SessionRequest): Promise<SessionProcess> {
    const container = await this.container(job);
    const tty = request.terminal !== undefined;
    const env = { ...request.env, ...(request.terminal ? { TERM: request.terminal.term } : {}) };
    const exec = await container.exec({
      Cmd: sessionCommandLine(request.command, VENV_DIR),
      AttachStdin: true, AttachStdout: true, AttachStderr: true, Tty: tty,
      Env: Object.entries(env).map(([name, value]) => `${name}=${value}`),
    });
    const stream = await exec.start({ hijack: true, stdin: true, Tty: tty });
    const resize = (cols: number, rows: number) => {
      exec.resize({ w: cols, h: rows }).catch(() => undefined);
    };
    if (request.terminal) resize(request.terminal.cols, request.terminal.rows);

    const stdout = new PassThrough();
    const stderr = tty ? null : new PassThrough();
    if (stderr) this.docker.modem.demuxStream(stream, stdout, stderr);
    else stream.pipe(stdout, { end: false });
    const ended = new Promise<void>((resolve) => {
      stream.once('end', resolve);
      stream.once('close', resolve);
      stream.once('error', () => resolve());
    });
    const exited = ended.then(async (): Promise<SessionExit> => {
      stdout.end();
      stderr?.end();
      return { code: await execExitCode(exec).catch(() => null) };
    });
    const stdin = new Writable({
      write: (chunk: Buffer, _encoding, callback) => stream.write(chunk, callback),
      final: (callback) => {
        stream.end();
        callback();
      },
    });
    return {
      stdin, stdout, stderr, exited, resize,
      // The engine's API has no signal for an exec; only a same-machine agent can send one.
      signal: (name) => {
        void signalExec(exec, name);
        return true;
      },
      end: () => {
        void signalExec(exec, 'SIGHUP');
        stream.destroy();
      },
    };
  }

  async files(job: JobStatus): Promise<FileStore> {
    const container = await this.container(job);
    const { Config } = await container.inspect();
    return new ContainerFileStore(this.docker, container, Config.WorkingDir || '/', Config.User);
  }

  async undeclaredPort(job: JobStatus, port: number): Promise<Upstream | string> {
    const { NetworkSettings } = await (await this.container(job)).inspect();
    const address = Object.values(NetworkSettings.Networks ?? {}).map((network) => network.IPAddress).find(Boolean);
    if (!address) return `port ${port} is not among the run's ports, and the container has no address this machine can reach: add it to ports`;
    return { host: address, port };
  }

  private async container(job: JobStatus): Promise<Docker.Container> {
    const [info] = await this.docker.listContainers({
      filters: { label: [`${LABELS.instanceId}=${this.instanceId}`, `${LABELS.jobId}=${job.jobId}`], status: ['running'] },
    });
    if (!info) throw new Error(`the container of job ${job.jobId} is not running`);
    return this.docker.getContainer(info.Id);
  }
}
