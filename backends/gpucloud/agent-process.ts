import type { ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { startAgentProcess } from '../../agent/launch.js';
import { isProcessAlive, processStartTime, signalProcessGroup, stopProcessGroup } from '../processes.js';
import { agentGpuSpec, type CatalogOffer } from './catalog.js';

/** An instance's agent: a process the emulator started, one it found running after a restart, or a simulated one (no pid). */
export interface AgentProcess {
  readonly pid: number | null;
  /** When the process started (Linux clock ticks since boot), to tell it from a later process with its pid; null where unknown. */
  readonly startTime: string | null;
  /** Resolves with how the process ended, e.g. `code 1`, `signal SIGKILL`. */
  readonly exited: Promise<string>;
  /** Stops watching the process and lets it run on without this one. */
  release(): void;
  /** Ends it at once, as a machine that loses its power. */
  kill(): void;
  /** Asks it to stop (SIGTERM), and kills it after `graceMs`; resolves once it has exited. */
  stop(graceMs: number): Promise<void>;
}

/** kill and stop of a process group led by `pid`. */
function groupSignals(pid: number, exited: Promise<string>): Pick<AgentProcess, 'kill' | 'stop'> {
  return {
    kill: () => void signalProcessGroup(pid, 'SIGKILL'),
    stop: (graceMs) => stopProcessGroup(pid, graceMs, exited.then(() => undefined)),
  };
}

/** Boots the agent of an instance and resolves with it and the base URL its API answers at. */
export type AgentLauncher = (boot: { instanceId: string; token: string; offer: CatalogOffer; workDir: string }) => Promise<{ agent: AgentProcess; url: string }>;

/** Boots each instance's agent as a real `orchestrator agent` process running its jobs on `runtime`. */
export function agentProcesses(runtime: 'process' | 'docker' | 'auto'): AgentLauncher {
  return async ({ instanceId, token, offer, workDir }) => {
    const { child, url } = await startAgentProcess({ token, instanceId, gpu: agentGpuSpec(offer), runtime, workDir, detached: true });
    return { agent: spawnedAgent(child), url };
  };
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
    ...groupSignals(child.pid!, exited),
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
  return { pid, startTime, exited, ...groupSignals(pid, exited), release: () => clearInterval(poll) };
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
