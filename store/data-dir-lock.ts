import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { isProcessAlive } from '../backends/processes.js';

/** Another live process holds the embedded data directory: opening it too would corrupt it. */
export class DataDirInUseError extends Error {
  constructor(readonly dataDir: string, readonly pid: number) {
    super(`the embedded database in ${dataDir} is in use by the process with pid ${pid}`);
    this.name = 'DataDirInUseError';
  }
}

/**
 * Takes `<dataDir>.lock`, which holds the pid of the process that has the directory open; a lock whose process is
 * gone (killed, crashed) is taken over. Returns the release, which removes the lock while it is still this process's.
 */
export function lockDataDir(dataDir: string): () => void {
  const path = `${dataDir}.lock`;
  for (;;) {
    try {
      writeFileSync(path, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      return () => {
        if (holderOf(path) === process.pid) rmSync(path, { force: true });
      };
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = holderOf(path);
    if (holder !== null && isProcessAlive(holder)) throw new DataDirInUseError(dataDir, holder);
    rmSync(path, { force: true });
  }
}

function holderOf(path: string): number | null {
  try {
    const pid = Number(readFileSync(path, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : null;
  } catch {
    return null;
  }
}
