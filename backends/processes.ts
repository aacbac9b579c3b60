import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';

/** Whether a process with this pid exists (a zombie counts until its parent reaps it). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Sends a signal to every process of the group led by `pid`; false when the group is already gone. */
export function signalProcessGroup(pid: number, signal: NodeJS.Signals): boolean {
  try {
    process.kill(-pid, signal);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw error;
  }
}

/**
 * Stops a process group: SIGTERM, then SIGKILL once the leader has exited or `graceMs` has passed,
 * so that children the leader left behind go too. `leaderExited` resolves when the leader is gone.
 */
export async function stopProcessGroup(pid: number, graceMs: number, leaderExited: Promise<void>): Promise<void> {
  if (!signalProcessGroup(pid, 'SIGTERM')) return;
  let graceTimer: NodeJS.Timeout | undefined;
  const graceOver = new Promise<void>((resolve) => { graceTimer = setTimeout(resolve, graceMs); });
  await Promise.race([leaderExited, graceOver]);
  clearTimeout(graceTimer);
  signalProcessGroup(pid, 'SIGKILL');
  await leaderExited;
}

/** Resolves once `pid` no longer exists, polling; for processes this one did not start. */
export async function waitForExit(pid: number, pollMs = 25): Promise<void> {
  while (isProcessAlive(pid)) await sleep(pollMs);
}

/**
 * When the process started, in clock ticks since boot (Linux /proc), to tell a process from a later one
 * that reused its pid; null where /proc is not available.
 */
export function processStartTime(pid: number): string | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  const fieldsAfterName = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fieldsAfterName[19] ?? null;
}
