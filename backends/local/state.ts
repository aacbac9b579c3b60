import { Type, type Static } from '@sinclair/typebox';
import { readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { BackendError } from '../backend.js';
import { firstMismatch } from '../validation.js';

/** What the local backend remembers of its one instance, so that a restarted server finds it again. */
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

export class LocalInstanceState {
  readonly file: string;

  constructor(stateDir: string) {
    this.file = join(stateDir, 'local-instance.json');
  }

  async read(): Promise<LocalInstanceRecord | null> {
    let text: string;
    try {
      text = await readFile(this.file, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
    let record: unknown;
    try {
      record = JSON.parse(text);
    } catch {
      throw new BackendError(`${this.file} is not valid JSON; remove it once no local agent runs`);
    }
    const mismatch = firstMismatch(LocalInstanceRecord, record);
    if (mismatch) throw new BackendError(`${this.file} is not a local instance record (${mismatch}); remove it once no local agent runs`);
    return record as LocalInstanceRecord;
  }

  /** Replaces the record atomically: a crash leaves the old file or the new one, never half of one. */
  async write(record: LocalInstanceRecord): Promise<void> {
    const partial = `${this.file}.${process.pid}.tmp`;
    await writeFile(partial, `${JSON.stringify(record, null, 2)}\n`, { mode: 0o600 });
    await rename(partial, this.file);
  }

  async forget(): Promise<void> {
    await rm(this.file, { force: true });
  }
}
