import { Type, type Static } from '@sinclair/typebox';
import { readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BackendError } from '../backend.js';
import { firstMismatch } from '../validation.js';

/** What the local backend remembers of one instance, so that a restarted server finds it again. */
export const LocalInstanceRecord = Type.Object({
  id: Type.String({ minLength: 1 }),
  idempotencyKey: Type.String(),
  pid: Type.Integer({ minimum: 1 }),
  /** Start time of the agent process (see processStartTime), to tell it from a later process with the same pid. */
  processStartTime: Type.Union([Type.String(), Type.Null()]),
  agentUrl: Type.String(),
  workDir: Type.String(),
  createdAt: Type.String(),
});
export type LocalInstanceRecord = Static<typeof LocalInstanceRecord>;

const RECORD_SUFFIX = '.json';

/**
 * One file per instance, `instances/<id>.json`, next to the instance's work folder. Versions that kept a single
 * instance wrote `local-instance.json`; it is still read, so that an upgraded server finds the agent it started.
 */
export class LocalInstanceState {
  readonly instancesDir: string;
  readonly singleRecordFile: string;

  constructor(stateDir: string) {
    this.instancesDir = join(stateDir, 'instances');
    this.singleRecordFile = join(stateDir, 'local-instance.json');
  }

  /** Every recorded instance, oldest first. */
  async readAll(): Promise<LocalInstanceRecord[]> {
    const files = (await readdir(this.instancesDir).catch(ignoreMissing([])))
      .filter((name) => name.endsWith(RECORD_SUFFIX))
      .map((name) => join(this.instancesDir, name));
    const records = await Promise.all([this.singleRecordFile, ...files].map((file) => readRecord(file)));
    return records
      .filter((record): record is LocalInstanceRecord => record !== null)
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  async find(id: string): Promise<LocalInstanceRecord | undefined> {
    return (await this.readAll()).find((record) => record.id === id);
  }

  /** Writes the record atomically: a crash leaves no file or the whole one, never half of one. */
  async write(record: LocalInstanceRecord): Promise<void> {
    const file = this.recordFile(record.id);
    const partial = `${file}.${process.pid}.tmp`;
    await writeFile(partial, `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 });
    await rename(partial, file);
  }

  async forget(id: string): Promise<void> {
    await rm(this.recordFile(id), { force: true });
    if ((await readRecord(this.singleRecordFile))?.id === id) await rm(this.singleRecordFile, { force: true });
  }

  private recordFile(id: string): string {
    return join(this.instancesDir, `${id}${RECORD_SUFFIX}`);
  }
}

async function readRecord(file: string): Promise<LocalInstanceRecord | null> {
  const text = await readFile(file, 'utf8').catch(ignoreMissing(null));
  if (text === null) return null;
  let record: unknown;
  try {
    record = JSON.parse(text);
  } catch {
    throw new BackendError(`${file} is not valid JSON; remove it once no local agent runs`);
  }
  const mismatch = firstMismatch(LocalInstanceRecord, record);
  if (mismatch) throw new BackendError(`${file} is not a local instance record (${mismatch}); remove it once no local agent runs`);
  return record as LocalInstanceRecord;
}

/** A file removed by a concurrent terminate is simply gone. */
function ignoreMissing<T>(fallback: T): (error: NodeJS.ErrnoException) => T {
  return (error) => {
    if (error.code === 'ENOENT') return fallback;
    throw error;
  };
}
