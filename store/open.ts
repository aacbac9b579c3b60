import type { Db } from './db.js';
import { migrate } from './migrations.js';
import { openPglite } from './pglite.js';
import { openPostgres } from './postgres.js';

/** postgres.js when a URL is given, the embedded PGlite data directory otherwise; migrated and ready. */
export async function openDatabase(options: { url?: string; dataDir?: string }): Promise<Db> {
  const db = options.url ? openPostgres(options.url) : await openPglite(options.dataDir);
  await migrate(db);
  return db;
}
