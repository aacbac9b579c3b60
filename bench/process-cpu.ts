/** The CPU time of a process, and which process listens on a port, from /proc (Linux). */
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';

const CLOCK_TICKS_PER_SECOND = 100;

/** User plus system CPU seconds the process has used so far. */
export function cpuSeconds(pid: number): number {
  return statCpuSeconds(readFileSync(`/proc/${pid}/stat`, 'utf8'));
}

/** From a /proc/<pid>/stat line: user plus system CPU seconds of the process, or of its children it has waited for. */
export function statCpuSeconds(stat: string, of: 'itself' | 'children' = 'itself'): number {
  // The command name, in parentheses, may hold spaces: the fields are counted after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const user = of === 'itself' ? 11 : 13;
  return (Number(fields[user]) + Number(fields[user + 1])) / CLOCK_TICKS_PER_SECOND;
}

/** The process with a socket listening on the TCP port, or undefined when none of this user's is found. */
export function listenerPid(port: number): number | undefined {
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const columns = line.trim().split(/\s+/);
      if (columns[1]?.endsWith(`:${hexPort}`) && columns[3] === '0A') inodes.add(`socket:[${columns[9]}]`);
    }
  }
  for (const entry of readdirSync('/proc').filter((name) => /^\d+$/.test(name))) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${entry}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        if (inodes.has(readlinkSync(`/proc/${entry}/fd/${fd}`))) return Number(entry);
      } catch { /* closed meanwhile */ }
    }
  }
  return undefined;
}
