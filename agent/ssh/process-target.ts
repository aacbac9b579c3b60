import { spawn as spawnProcess } from 'node:child_process';
import { constants } from 'node:os';
import { PassThrough, Writable } from 'node:stream';
import { spawn as spawnTerminal } from '@lydell/node-pty';
import type { JobStatus } from '../../api/agent.js';
import type { ProcessJobPlace, ProcessRuntime } from '../process-runtime.js';
import type { Upstream } from '../port-forward.js';
import type { FileStore } from './file-store.js';
import { LocalFileStore } from './local-files.js';
import { sessionCommandLine, type JobTarget, type SessionExit, type SessionProcess, type SessionRequest } from './job-target.js';

/** How long a session's processes get after SIGHUP, once its client went, before SIGKILL. */
const HANGUP_GRACE_MS = 2000;

function signalName(signal: number | NodeJS.Signals | null | undefined): string | undefined {
  if (!signal) return undefined;
  const name = typeof signal === 'string' ? signal : Object.entries(constants.signals).find(([, number]) => number === signal)?.[0];
  return name?.replace(/^SIG/, '');
}

/** Signals a process group, ignoring one that is already gone. */
function signalGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
  }
}

/** SIGHUP to the session's group, as a hung-up terminal sends, then SIGKILL for whatever ignored it. */
function hangUp(pid: number | undefined, exited: Promise<unknown>): void {
  signalGroup(pid, 'SIGHUP');
  const kill = setTimeout(() => signalGroup(pid, 'SIGKILL'), HANGUP_GRACE_MS);
  void exited.finally(() => clearTimeout(kill));
}

function withTerminal(argv: string[], place: ProcessJobPlace, env: NodeJS.ProcessEnv, terminal: NonNullable<SessionRequest['terminal']>): SessionProcess {
  const term = spawnTerminal(argv[0]!, argv.slice(1), { name: terminal.term, cols: terminal.cols, rows: terminal.rows, cwd: place.workingDir, env, encoding: null });
  const stdout = new PassThrough();
  term.onData((data) => stdout.write(data));
  const exited = new Promise<SessionExit>((resolve) => {
    term.onExit(({ exitCode, signal }) => {
      // The terminal's last output may still be on its way when the exit is reported.
      setImmediate(() => {
        stdout.end();
        resolve({ code: signal ? null : exitCode, signal: signalName(signal) });
      });
    });
  });
  const stdin = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      (term.write as (data: string | Buffer) => void)(chunk);
      callback();
    },
  });
  return {
    stdin, stdout, stderr: null, exited,
    resize: (cols, rows) => term.resize(cols, rows),
    signal: (name) => {
      signalGroup(term.pid, name);
      return true;
    },
    end: () => hangUp(term.pid, exited),
  };
}

function withPipes(argv: string[], place: ProcessJobPlace, env: NodeJS.ProcessEnv): SessionProcess {
  const child = spawnProcess(argv[0]!, argv.slice(1), { cwd: place.workingDir, env, detached: true, stdio: 'pipe' });
  const exited = new Promise<SessionExit>((resolve) => {
    child.once('error', () => resolve({ code: 127 }));
    child.once('close', (code, signal) => resolve({ code, signal: signalName(signal) }));
  });
  child.stdin.on('error', () => undefined);
  return {
    stdin: child.stdin, stdout: child.stdout, stderr: child.stderr, exited,
    resize: () => undefined,
    signal: (name) => {
      signalGroup(child.pid, name);
      return true;
    },
    end: () => hangUp(child.pid, exited),
  };
}

/** Sessions of process jobs: processes on this machine, in the job's working directory, with its environment. */
export class ProcessTarget implements JobTarget {
  constructor(private readonly runtime: ProcessRuntime) {}

  async start(job: JobStatus, request: SessionRequest): Promise<SessionProcess> {
    const place = this.placeOf(job);
    const env: NodeJS.ProcessEnv = { ...place.env, ...request.env, ...(request.terminal ? { TERM: request.terminal.term } : {}) };
    const argv = sessionCommandLine(request.command);
    return request.terminal ? withTerminal(argv, place, env, request.terminal) : withPipes(argv, place, env);
  }

  async files(job: JobStatus): Promise<FileStore> {
    return new LocalFileStore(this.placeOf(job).workingDir);
  }

  async undeclaredPort(_job: JobStatus, port: number): Promise<Upstream> {
    return { host: '127.0.0.1', port };
  }

  private placeOf(job: JobStatus): ProcessJobPlace {
    const place = this.runtime.place(job.jobId);
    if (!place) throw new Error(`job ${job.jobId} was not started by this agent`);
    return place;
  }
}
