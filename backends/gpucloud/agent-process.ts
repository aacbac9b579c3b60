import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { isProcessAlive, processStartTime } from '../processes.js';

/** An instance's agent process: one the emulator started, or one it found running after a restart. */
export interface AgentProcess {
  readonly pid: number;
  /** When the process started (Linux clock ticks since boot), to tell it from a later process with its pid; null where unknown. */
  readonly startTime: string | null;
  /** Resolves with how the process ended, e.g. `code 1`, `signal SIGKILL`. */
  readonly exited: Promise<string>;
  /** Stops watching the process and lets it run on without this one. */
  release(): void;
}

const ADOPTED_POLL_MS = 500;

export function spawnedAgent(child: ChildProcess): AgentProcess {
  const describe = () => (child.signalCode ? `signal ${child.signalCode}` : `code ${child.exitCode}`);
  const exited = new Promise<string>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(describe());
    else child.once('exit', () => resolve(describe()));
  });
  return {
    pid: child.pid!,
    startTime: processStartTime(child.pid!),
    exited,
    release: () => {
      child.removeAllListeners('exit');
      child.stdout?.destroy();
      child.stderr?.destroy();
      child.unref();
    },
  };
}

/** The agent a previous run of the emulator started, when it still runs; null when it is gone. */
export function adoptAgent(pid: number, startTime: string | null): AgentProcess | null {
  const alive = () => isSameLiveProcess(pid, startTime);
  if (!alive()) return null;
  let poll: NodeJS.Timeout | undefined;
  const exited = new Promise<string>((resolve) => {
    poll = setInterval(() => {
      if (alive()) return;
      clearInterval(poll);
      resolve('an exit status the emulator did not see, as it did not start this process');
    }, ADOPTED_POLL_MS);
    poll.unref();
  });
  return { pid, startTime, exited, release: () => clearInterval(poll) };
}

/**
 * Whether `pid` is still the process that started at `startTime` and has not exited. A process that
 * is not our child is reaped by whatever adopted it, or never: an unreaped zombie counts as gone.
 */
function isSameLiveProcess(pid: number, startTime: string | null): boolean {
  return isProcessAlive(pid) && !isZombie(pid) && processStartTime(pid) === startTime;
}

function isZombie(pid: number): boolean {
  try {
    return /^State:\s+[ZX]/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
}
