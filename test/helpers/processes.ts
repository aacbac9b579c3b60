import { readdirSync, readFileSync } from 'node:fs';

/** Live processes (not zombies) of this user whose environment holds `entry` (`NAME=value`), as it was when each started. */
export function processesWith(entry: string): number[] {
  return readdirSync('/proc').filter((name) => /^\d+$/.test(name)).map(Number).filter((pid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return stat[stat.lastIndexOf(')') + 2] !== 'Z' && readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(entry);
    } catch {
      return false;
    }
  });
}
