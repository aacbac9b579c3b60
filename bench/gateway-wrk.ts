/** Runs Debian's `wrk` against one URL and reads its figures. */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { statCpuSeconds } from './process-cpu.js';

export interface WrkLoad {
  threads: number;
  connections: number;
  seconds: number;
}

export interface WrkFigures {
  requests: number;
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  /** Answers other than 2xx/3xx, and socket errors (connect, read, write, timeout), which wrk counts apart. */
  failures: number;
  /** The CPU seconds wrk itself used, user and system: it shares the machine's cores with what it measures. */
  cpuSeconds: number;
}

const run = promisify(execFile);

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000 };

function durationMs(text: string): number {
  const match = /^([\d.]+)(us|ms|s|m)$/.exec(text);
  if (!match) throw new Error(`wrk printed a latency it is not known to print: ${text}`);
  return Number(match[1]) * UNIT_MS[match[2]!]!;
}

/** wrk's own output, as its --latency form prints it. */
export function parseWrk(output: string): Omit<WrkFigures, 'cpuSeconds'> {
  const figure = (pattern: RegExp) => {
    const match = pattern.exec(output);
    if (!match) throw new Error(`wrk's output lacks ${pattern}:\n${output}`);
    return match[1]!;
  };
  const socketErrors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(output);
  const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(output);
  return {
    requests: Number(figure(/(\d+) requests in /)),
    requestsPerSecond: Number(figure(/Requests\/sec:\s+([\d.]+)/)),
    p50Ms: durationMs(figure(/^\s+50%\s+(\S+)\s*$/m)),
    p99Ms: durationMs(figure(/^\s+99%\s+(\S+)\s*$/m)),
    failures: (socketErrors ? socketErrors.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0) + Number(non2xx?.[1] ?? 0),
  };
}

/**
 * wrk runs under a shell that, once wrk has exited, prints its own /proc stat line: its children's user and
 * system time (fields 16 and 17) are then wrk's.
 */
const WRK_WITH_ITS_CPU = 'wrk "$@" && cat /proc/$$/stat';

export async function wrk(url: string, load: WrkLoad, headers: Record<string, string> = {}): Promise<WrkFigures> {
  const args = [`-t${load.threads}`, `-c${load.connections}`, `-d${load.seconds}s`, '--latency'];
  for (const [name, value] of Object.entries(headers)) args.push('-H', `${name}: ${value}`);
  const { stdout } = await run('sh', ['-c', WRK_WITH_ITS_CPU, 'sh', ...args, url], { maxBuffer: 1024 * 1024 });
  return { ...parseWrk(stdout), cpuSeconds: statCpuSeconds(stdout.trimEnd().split('\n').at(-1)!, 'children') };
}
