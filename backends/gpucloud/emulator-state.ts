import { Type, type Static } from '@sinclair/typebox';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { firstMismatch } from '../validation.js';
import { GpucloudCluster, GpucloudInstance } from './api.js';

/** What the emulator keeps of one instance across its restarts (`--state-dir`). */
export const SavedInstance = Type.Object({
  record: GpucloudInstance,
  agent_token: Type.String(),
  agent_pid: Type.Union([Type.Integer(), Type.Null()]),
  agent_start_time: Type.Union([Type.String(), Type.Null()]),
  work_dir: Type.String(),
});
export type SavedInstance = Static<typeof SavedInstance>;

/** What the emulator keeps across its restarts; a file written before clusters existed has none. */
export const SavedState = Type.Object({ instances: Type.Array(SavedInstance), clusters: Type.Optional(Type.Array(GpucloudCluster)) });
export type SavedState = Static<typeof SavedState>;

const KEY_FILE = 'api-key';
const INSTANCES_FILE = 'instances.json';
const PRIVATE = 0o600;

/** The emulator's folder of state: its API key, if it made one, and its instances (agent tokens included) and clusters, readable by its owner only. */
export class EmulatorStateDir {
  constructor(readonly path: string) {
    mkdirSync(path, { recursive: true, mode: 0o700 });
  }

  /** The key kept here, or `generate()`'s, kept for the next start. */
  apiKey(generate: () => string): string {
    const kept = this.read(KEY_FILE)?.trim();
    if (kept) return kept;
    const key = generate();
    this.write(KEY_FILE, `${key}\n`);
    return key;
  }

  state(): Required<SavedState> {
    const text = this.read(INSTANCES_FILE);
    if (text === null) return { instances: [], clusters: [] };
    const file = join(this.path, INSTANCES_FILE);
    let state: unknown;
    try {
      state = JSON.parse(text);
    } catch (error) {
      throw new Error(`cannot read ${file}: ${(error as Error).message}; move it away to start with no instances`);
    }
    const mismatch = firstMismatch(SavedState, state);
    if (mismatch) throw new Error(`cannot read ${file}: ${mismatch}; move it away to start with no instances`);
    const saved = state as SavedState;
    return { instances: saved.instances, clusters: saved.clusters ?? [] };
  }

  /** Replaces the file whole (write, then rename), so that a crash leaves the old state or the new one. */
  saveState(state: Required<SavedState>): void {
    this.write(INSTANCES_FILE, `${JSON.stringify(state, null, 2)}\n`);
  }

  private read(name: string): string | null {
    try {
      return readFileSync(join(this.path, name), 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw error;
    }
  }

  private write(name: string, text: string): void {
    const file = join(this.path, name);
    writeFileSync(`${file}.tmp`, text, { mode: PRIVATE });
    renameSync(`${file}.tmp`, file);
  }
}
