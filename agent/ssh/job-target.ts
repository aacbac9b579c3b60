import type { Readable, Writable } from 'node:stream';
import type { JobStatus } from '../../api/agent.js';
import type { Upstream } from '../port-forward.js';
import type { FileStore } from './file-store.js';

export interface TerminalRequest {
  term: string;
  cols: number;
  rows: number;
}

/** One command (or, without `command`, a login shell) inside a running job. */
export interface SessionRequest {
  command?: string;
  /** Present when the client asked for a pseudo-terminal. */
  terminal?: TerminalRequest;
  /** Variables the client sent (`env` requests, e.g. LANG), on top of the job's environment. */
  env: Record<string, string>;
}

export interface SessionExit {
  code: number | null;
  /** Signal name without "SIG", when the process was killed by one. */
  signal?: string;
}

/** A process started for an SSH session. With a terminal, `stderr` is null: both streams arrive on `stdout`. */
export interface SessionProcess {
  stdin: Writable;
  stdout: Readable;
  stderr: Readable | null;
  resize(cols: number, rows: number): void;
  /** False when the runtime cannot deliver signals to the session's process. */
  signal(name: NodeJS.Signals): boolean;
  /** Ends the process and what it started; called when the client goes. */
  end(): void;
  readonly exited: Promise<SessionExit>;
}

/** How SSH sessions reach into a running job, per runtime. */
export interface JobTarget {
  start(job: JobStatus, request: SessionRequest): Promise<SessionProcess>;
  /** The job's files as the SFTP subsystem serves them. */
  files(job: JobStatus): Promise<FileStore>;
  /**
   * Where `ssh -L` to a port the job did not declare goes; a string says why it cannot be reached.
   * (Declared ports go where the port forward sends them.)
   */
  undeclaredPort(job: JobStatus, port: number): Promise<Upstream | string>;
}

/** Variables a client may set, as OpenSSH's default AcceptEnv: the locale. */
export function acceptedClientVariable(name: string): boolean {
  return name === 'LANG' || name.startsWith('LC_');
}

/**
 * The command line of a session: the image's bash when it has one, else sh; a login shell without
 * a command, as sshd starts one. With `venv`, a virtual environment there is activated first, when the job
 * has one, so that the session's python and pip are those its commands ran with.
 */
export function sessionCommandLine(command: string | undefined, venv?: string): string[] {
  const activate = venv === undefined ? '' : `if [ -f ${venv}/bin/activate ]; then . ${venv}/bin/activate; fi;`;
  const shell = `${activate} if [ -x /bin/bash ]; then shell=/bin/bash; else shell=/bin/sh; fi;`;
  return command === undefined
    ? ['/bin/sh', '-c', `${shell} exec "$shell" -l`]
    : ['/bin/sh', '-c', `${shell} exec "$shell" -c "$1"`, 'sh', command];
}
