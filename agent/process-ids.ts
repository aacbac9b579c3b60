import { readFileSync, readlinkSync, statfsSync } from 'node:fs';

/**
 * Where the machine's process ids stood at one moment. Linux hands out ids in turn, after the last one it gave,
 * skipping those in use and wrapping from `pid_max` back to 300: a process made after that moment has an id after
 * `lastId`, unless the ids have since gone all the way round.
 */
export interface ProcessIdClock {
  /** The id last handed out in this process's namespace (/proc/loadavg). */
  lastId: number;
  /** Processes and threads made since boot, machine-wide (/proc/stat): never fewer than ids handed out here. */
  forks: number;
  /** Processes and threads alive, machine-wide (/proc/loadavg): never fewer than ids in use here. */
  alive: number;
  /** Ids wrap from here (/proc/sys/kernel/pid_max). */
  idLimit: number;
}

/** Ids below this are kept for the kernel's own processes and never handed out after a wrap. */
const FIRST_WRAPPED_ID = 300;

/** The kernel's own proc file system (statfs). lxcfs, in some containers, mounts files of its own over /proc's. */
const PROC_SUPER_MAGIC = 0x9fa0;

/** Whether /proc is the kernel's own and of this process's namespace: asked once, it does not change while it runs. */
let procTellsIds: boolean | undefined;

function procIsOurs(): boolean {
  try {
    procTellsIds ??= readlinkSync('/proc/self') === String(process.pid)
      && statfsSync('/proc/loadavg').type === PROC_SUPER_MAGIC && statfsSync('/proc/stat').type === PROC_SUPER_MAGIC;
  } catch {
    procTellsIds = false;
  }
  return procTellsIds;
}

/**
 * Null where /proc does not tell, tells of another namespace's ids, or is not the kernel's: ids cannot then be told
 * apart by age.
 */
export function processIdClock(): ProcessIdClock | null {
  if (!procIsOurs()) return null;
  try {
    const loadavg = readFileSync('/proc/loadavg', 'latin1').trim().split(/\s+/);
    const forks = /^processes (\d+)$/m.exec(readFileSync('/proc/stat', 'latin1'))?.[1];
    const clock = {
      lastId: Number(loadavg[4]),
      alive: Number(loadavg[3]?.split('/')[1]),
      forks: Number(forks),
      idLimit: Number(readFileSync('/proc/sys/kernel/pid_max', 'latin1')),
    };
    return Object.values(clock).every(Number.isInteger) ? clock : null;
  } catch {
    return null;
  }
}

/**
 * The ids of `ids` that may belong to processes made after `since`, the clock read then; `now` is read after `ids`
 * were listed; `madeSince` is the id of a process known to be made after `since` (a job's first). To go all the way
 * round, ids must pass every id once: each was either handed out since (a fork) or skipped in use by a process that was
 * alive at `since` or made since. While the forks since and those alive then are fewer than a full round, the ids made
 * since lie between `since.lastId` and `now.lastId`; otherwise every id may. Where `madeSince` is not between them,
 * /proc tells ids otherwise than Linux does, and every id may be one made since.
 */
export function idsMadeSince(ids: number[], since: ProcessIdClock | null, now: ProcessIdClock | null, madeSince: number): number[] {
  const madeBetween = idsBetween(since, now);
  return madeBetween && madeBetween(madeSince) ? ids.filter(madeBetween) : ids;
}

function idsBetween(since: ProcessIdClock | null, now: ProcessIdClock | null): ((id: number) => boolean) | null {
  if (!since || !now || since.idLimit !== now.idLimit) return null;
  if (now.forks - since.forks + since.alive >= now.idLimit - FIRST_WRAPPED_ID) return null;
  const from = since.lastId;
  const to = now.lastId;
  return from <= to ? (id) => id > from && id <= to : (id) => id > from || id <= to;
}
