import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { idsMadeSince, processIdClock, type ProcessIdClock } from './process-ids.js';
import type { StopSignal } from './runtime.js';

/**
 * Every process of a process job carries this variable, with a value of its own, from its shell to whatever
 * SSH sessions into it start: the job's processes are found by it even after they left its process group
 * (nohup, setsid, a double fork), as a container's end with its container.
 */
export const JOB_MARKER_VARIABLE = 'ORCHESTRATOR_JOB_MARKER';

/** Passes of a sweep at most: each kills what the one before missed (a child forked in between). */
const MAX_SWEEPS = 20;
/** Processes read between two turns of the event loop. */
const SCAN_CHUNK = 64;

/** A job's marker, where the process ids stood before its first process was made, and that process's id. */
export interface JobMark {
  marker: string;
  since: ProcessIdClock | null;
  firstId: number;
}

/** Taken before the job's first process is made; its id completes the mark. */
export function newJobMark(): Omit<JobMark, 'firstId'> {
  return { marker: randomUUID(), since: processIdClock() };
}

/**
 * The live processes whose initial environment holds `JOB_MARKER_VARIABLE=marker`. Processes of other users
 * cannot be read and are never counted, nor zombies, which hold nothing any more. Only processes made since the
 * job's mark are read, where their ids tell (a machine's every process otherwise). Read synchronously, a few dozen
 * processes at a time between turns of the event loop: each read through the thread pool cost several times its work.
 */
export async function markedProcesses({ marker, since, firstId }: JobMark): Promise<number[]> {
  const entry = Buffer.from(`${JOB_MARKER_VARIABLE}=${marker}\0`);
  let pids: number[];
  try {
    const listed = readdirSync('/proc').filter((name) => /^\d+$/.test(name)).map(Number);
    pids = idsMadeSince(listed, since, processIdClock(), firstId);
  } catch {
    return [];
  }
  const marked: number[] = [];
  for (let start = 0; start < pids.length; start += SCAN_CHUNK) {
    if (start > 0) await new Promise((resolve) => setImmediate(resolve));
    for (const pid of pids.slice(start, start + SCAN_CHUNK)) {
      if (pid !== process.pid && isMarked(pid, entry)) marked.push(pid);
    }
  }
  return marked;
}

function isMarked(pid: number, entry: Buffer): boolean {
  try {
    const environ = readFileSync(`/proc/${pid}/environ`);
    for (let at = environ.indexOf(entry); at !== -1; at = environ.indexOf(entry, at + 1)) {
      if (at === 0 || environ[at - 1] === 0) return !isZombie(pid);
    }
    return false;
  } catch {
    return false;
  }
}

/** Sends `signal` to every process of the job once. */
export async function signalMarked(mark: JobMark, signal: StopSignal): Promise<void> {
  for (const pid of await markedProcesses(mark)) signalProcess(pid, signal);
}

/** Kills every process of the job, again until none is left (or after MAX_SWEEPS passes); returns how many it found. */
export async function killMarked(mark: JobMark): Promise<number> {
  const killed = new Set<number>();
  for (let pass = 0; pass < MAX_SWEEPS; pass += 1) {
    const pids = await markedProcesses(mark);
    if (pids.length === 0) break;
    for (const pid of pids) {
      signalProcess(pid, 'SIGKILL');
      killed.add(pid);
    }
    await new Promise((done) => setTimeout(done, 20));
  }
  return killed.size;
}

function isZombie(pid: number): boolean {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name, in parentheses, may hold spaces and parentheses: the state follows the last ')'.
  return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z';
}

function signalProcess(pid: number, signal: StopSignal): void {
  try {
    process.kill(pid, signal);
  } catch (error) {
    // Gone already, or a process that became another user's (setuid): neither is ours to end.
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'ESRCH' && code !== 'EPERM') throw error;
  }
}
