import { statSync, type Stats } from 'node:fs';

const CHECK_INTERVAL_MS = 1000;

export interface OrphanWatchOptions {
  /** How long the agent may go without a server's request before it ends itself once idle; 0: never. */
  orphanTimeoutSeconds: number;
  /** A directory whose removal ends the agent at once, jobs and all (the local backend's instance folder). */
  exitWhenMissing?: string;
  /** Whether a job is still pending or running: an orphaned agent keeps it, as a cloud instance would. */
  busy(): boolean;
}

/**
 * Decides when an agent must end itself because no server will come back for it: nobody has called
 * for longer than the orphan timeout and no job is left, or the folder it belongs to was removed.
 */
export class OrphanWatch {
  private lastContact = Date.now();
  private timer: NodeJS.Timeout | null = null;
  private readonly folder: { dir: string; stats: Stats } | null = null;

  constructor(private readonly options: OrphanWatchOptions) {
    const { orphanTimeoutSeconds, exitWhenMissing } = options;
    if (!Number.isFinite(orphanTimeoutSeconds) || orphanTimeoutSeconds < 0) {
      throw new Error(`invalid orphan timeout ${orphanTimeoutSeconds}: expected 0 (off) or more seconds`);
    }
    if (exitWhenMissing !== undefined) {
      const stats = directoryStats(exitWhenMissing);
      if (stats === null) throw new Error(`cannot watch ${exitWhenMissing}: it is not a directory`);
      this.folder = { dir: exitWhenMissing, stats };
    }
  }

  /** A server reached the agent: the orphan timeout starts again. */
  contact(): void {
    this.lastContact = Date.now();
  }

  /** Checks every second; `expired` is called once, with the reason, when the agent should end. */
  start(expired: (reason: string) => void): void {
    this.timer = setInterval(() => {
      const reason = this.reasonToEnd();
      if (reason === null) return;
      this.stop();
      expired(reason);
    }, CHECK_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private reasonToEnd(): string | null {
    if (this.folder && replaced(this.folder.dir, this.folder.stats)) return `its folder ${this.folder.dir} was removed`;
    const { orphanTimeoutSeconds } = this.options;
    const silentMs = Date.now() - this.lastContact;
    if (orphanTimeoutSeconds > 0 && silentMs >= orphanTimeoutSeconds * 1000 && !this.options.busy()) {
      return `no server has called for ${Math.floor(silentMs / 1000)} s (orphan timeout ${orphanTimeoutSeconds} s) and no job is running`;
    }
    return null;
  }
}

/** The directory's stat, or null when there is no directory at `dir`. */
function directoryStats(dir: string): Stats | null {
  const stats = statSync(dir, { throwIfNoEntry: false });
  return stats?.isDirectory() ? stats : null;
}

/**
 * Whether `dir` is no longer the directory it was: gone, or removed and made again at the same path
 * (by a new server, or by a job). A failure to look that is not about the path itself counts as still there.
 */
function replaced(dir: string, original: Stats): boolean {
  let now: Stats | null;
  try {
    now = directoryStats(dir);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOTDIR';
  }
  return now === null || now.ino !== original.ino || now.dev !== original.dev;
}
