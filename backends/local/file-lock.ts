import { open, readFile, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { BackendError } from '../backend.js';
import { isProcessAlive } from '../processes.js';

const POLL_MS = 25;

/**
 * Runs `work` while holding an exclusive lock file, so that concurrent calls (in this process or in another
 * server on the same machine) never both act. A lock left by a process that died is taken over.
 */
export async function withFileLock<T>(path: string, timeoutMs: number, work: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const handle = await open(path, 'wx');
      await handle.writeFile(String(process.pid));
      await handle.close();
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    const holder = Number((await readFile(path, 'utf8').catch(() => '')).trim());
    if (Number.isInteger(holder) && holder > 0 && !isProcessAlive(holder)) {
      await rm(path, { force: true });
      continue;
    }
    if (Date.now() > deadline) throw new BackendError(`timed out after ${timeoutMs} ms waiting for the lock ${path}`, true);
    await sleep(POLL_MS);
  }
  try {
    return await work();
  } finally {
    await rm(path, { force: true });
  }
}
