import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { parsePortMapping } from '../api/mappings.js';
import { CliError } from './errors.js';
import { sshConfigPath } from './ssh-config.js';

/**
 * A port of the run to reach from this machine; an explicit local port must be that one, an implicit one may move up,
 * and null takes any free one.
 */
export interface PortRequest {
  local: number | null;
  container: number;
  explicit: boolean;
}

export interface PortForward {
  local: number;
  container: number;
}

/** How many ports above a busy implicit one are tried. */
const IMPLICIT_PORT_TRIES = 100;
const FIRST_BACKOFF_MS = 1000;
const MAX_BACKOFF_MS = 30_000;

/** The spec's `ports`: a bare port asks for the same local port if free; "local:container" asks for exactly that one; "*:container" for any. */
export function portRequests(ports: readonly (number | string)[]): PortRequest[] {
  return ports.map((entry) => ({ ...parsePortMapping(entry), explicit: typeof entry === 'string' && entry.includes(':') }));
}

/** The port when it is free on 127.0.0.1 (for 0: a free one the system picks), else null. */
function freeLocalPort(port: number): Promise<number | null> {
  const probe = createServer();
  return new Promise((resolve) => {
    probe.once('error', () => resolve(null));
    probe.listen({ port, host: '127.0.0.1', exclusive: true }, () => {
      const { port: bound } = probe.address() as { port: number };
      probe.close(() => resolve(bound));
    });
  });
}

/** The local ports to listen on: a busy explicit one is an error, a busy implicit one moves to the next free one. */
export async function choosePorts(requests: readonly PortRequest[]): Promise<PortForward[]> {
  const taken = new Set<number>();
  const chosen: PortForward[] = [];
  for (const request of requests) {
    if (request.local === null) {
      let any: number | null;
      do any = await freeLocalPort(0); while (any === null || taken.has(any));
      taken.add(any);
      chosen.push({ local: any, container: request.container });
      continue;
    }
    let local = request.local;
    while (taken.has(local) || (await freeLocalPort(local)) === null) {
      if (request.explicit) throw new CliError(`local port ${local} is in use, so ${local}:${request.container} cannot be forwarded; free it or map another local port`);
      if (++local > Math.min(65535, request.local + IMPLICIT_PORT_TRIES)) throw new CliError(`no free local port from ${request.local} to ${local - 1} for the run's port ${request.container}`);
    }
    taken.add(local);
    chosen.push({ local, container: request.container });
  }
  return chosen;
}

/**
 * Holds one OpenSSH connection to `host` of ~/.orchestrator/ssh/config with the forwards on it, reconnecting with
 * backoff when it drops, until stopped or `runEnded` says the run is over. The open connection is also what keeps
 * a dev environment's inactivity_duration from running out while attached.
 */
export class PortForwarder {
  private child: ChildProcess | null = null;
  private stopped = false;
  readonly done: Promise<void>;

  constructor(private readonly host: string, private readonly forwards: readonly PortForward[], private readonly runEnded: () => Promise<boolean>,
    private readonly onReady: (forwards: readonly PortForward[]) => void) {
    this.done = this.loop();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.child?.kill('SIGTERM');
    await this.done;
  }

  private async loop(): Promise<void> {
    let backoff = FIRST_BACKOFF_MS;
    let announced = false;
    while (!this.stopped) {
      const { ready, exited } = this.connect();
      if (await ready) {
        backoff = FIRST_BACKOFF_MS;
        if (!announced) this.onReady(this.forwards);
        else process.stderr.write(`reconnected to ${this.host}\n`);
        announced = true;
      }
      const reason = await exited;
      if (this.stopped || (await this.runEnded().catch(() => false))) return;
      process.stderr.write(`connection to ${this.host} lost (${reason}); reconnecting in ${backoff / 1000}s\n`);
      await sleep(backoff);
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }

  /** One ssh -N: `ready` once every forward listens (ssh -v says so), `exited` with what ended it. */
  private connect(): { ready: Promise<boolean>; exited: Promise<string> } {
    const args = ['-F', sshConfigPath(), '-N', '-v', '-o', 'BatchMode=yes', '-o', 'ExitOnForwardFailure=yes',
      '-o', 'ServerAliveInterval=5', '-o', 'ServerAliveCountMax=3',
      ...this.forwards.flatMap((f) => ['-L', `127.0.0.1:${f.local}:localhost:${f.container}`]), this.host];
    const child = spawn('ssh', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    this.child = child;
    const listening = new Set<number>();
    let lastProblem = '';
    let markReady: (ready: boolean) => void = () => undefined;
    const ready = new Promise<boolean>((resolve) => { markReady = resolve; });
    const readyWhenAll = () => {
      if (listening.size === this.forwards.length) markReady(true);
    };
    let pending = '';
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      const lines = (pending + chunk).split('\n');
      pending = lines.pop()!;
      for (const line of lines) {
        const bound = /Local forwarding listening on \S+ port (\d+)/.exec(line);
        if (bound) listening.add(Number(bound[1]));
        else if (/Authenticated to|Entering interactive session/.test(line)) readyWhenAll();
        if (!/^(debug|Authenticated|Transferred)/.test(line) && line.trim() !== '') lastProblem = line.trim();
      }
      if (listening.size > 0) readyWhenAll();
    });
    const exited = new Promise<string>((resolve) => {
      child.once('error', (error: NodeJS.ErrnoException) => {
        this.stopped = true;
        markReady(false);
        resolve(error.code === 'ENOENT' ? 'ssh is not installed; install the OpenSSH client' : error.message);
        if (error.code === 'ENOENT') process.stderr.write('error: ssh is not installed; install the OpenSSH client (e.g. apt install openssh-client)\n');
      });
      child.once('close', (code) => {
        markReady(false);
        resolve(lastProblem || `ssh exited with ${code}`);
      });
    });
    return { ready, exited };
  }
}

export function describeForwards(forwards: readonly PortForward[]): string {
  return forwards.map((f) => `Forwarding localhost:${f.local} -> port ${f.container} of the run\n`).join('');
}
