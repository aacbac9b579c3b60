import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import type { Db } from '../../store/db.js';
import { openPglite } from '../../store/pglite.js';
import { openPostgres } from '../../store/postgres.js';

export type DatabaseKind = 'pglite' | 'postgres';

/** Every suite that touches the database runs once per driver. */
export const DATABASE_KINDS: DatabaseKind[] = ['pglite', 'postgres'];

/**
 * For suites whose subject is not the database (what the CLI prints, a policy's effect on a run, the emulator across
 * its restarts): the embedded one only, as the store's behaviour is covered on both by the suites about it.
 */
export const ONE_DATABASE: DatabaseKind[] = ['pglite'];

export const POSTGRES_ADMIN_URL = process.env.ORCHESTRATOR_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** A fresh, empty Postgres database for one suite; drop it when done. */
export async function createScratchDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `orch_test_${randomBytes(6).toString('hex')}`;
  const admin = postgres(POSTGRES_ADMIN_URL, { max: 1, onnotice: () => {} });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(POSTGRES_ADMIN_URL);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const again = postgres(POSTGRES_ADMIN_URL, { max: 1, onnotice: () => {} });
      await again.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await again.end();
    },
  };
}

/** An empty database of `kind` for one suite, opened; `close()` closes it and drops a PostgreSQL one. */
export async function openScratchDb(kind: DatabaseKind): Promise<{ db: Db; close(): Promise<void> }> {
  if (kind === 'pglite') {
    const db = await openPglite();
    return { db, close: () => db.close() };
  }
  const scratch = await createScratchDatabase();
  const db = openPostgres(scratch.url);
  return {
    db,
    close: async () => {
      await db.close();
      await scratch.drop();
    },
  };
}
