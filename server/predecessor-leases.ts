import { readFileSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { isProcessAlive } from '../backends/processes.js';
import type { Db } from '../store/db.js';
import { releaseAllLeases } from '../store/leases.js';

/** In the server's folder: the controllers' lease owner of the server that last started from it, with its host and pid. */
export const CONTROLLER_OWNER_FILE = 'controller-owner.json';

interface OwnerRecord { owner: string; host: string; pid: number }

/**
 * Gives back the leases held by the server that last ran from this folder, when it is gone (SIGKILL, a crash, a power
 * cut), so that the rows it was reconciling are looked at again at once instead of after their leases run out (15 s
 * for a run). A server still running from this folder, or one on another host sharing it, keeps its leases. A
 * `soleServer` (the only one its database can have) gives back every lease, whoever recorded it: a container made anew
 * starts under another host name. Then records `owner` as this folder's server for the next start.
 */
export async function takeOverPredecessorLeases(db: Db, dir: string, owner: string, soleServer: boolean): Promise<void> {
  const file = join(dir, CONTROLLER_OWNER_FILE);
  const previous = readRecord(file);
  if (soleServer) {
    await releaseAllLeases(db, null);
  } else if (previous && previous.host === hostname() && (previous.pid === process.pid || !isProcessAlive(previous.pid))) {
    // A pid equal to ours belongs to an earlier process (a restarted container starts at the same pid), not to us.
    await releaseAllLeases(db, previous.owner);
  }
  const record: OwnerRecord = { owner, host: hostname(), pid: process.pid };
  writeFileSync(file, `${JSON.stringify(record)}\n`, { mode: 0o600 });
}

function readRecord(file: string): OwnerRecord | null {
  try {
    const record = JSON.parse(readFileSync(file, 'utf8')) as Partial<OwnerRecord>;
    return typeof record.owner === 'string' && typeof record.host === 'string' && Number.isInteger(record.pid) ? record as OwnerRecord : null;
  } catch {
    return null;
  }
}
