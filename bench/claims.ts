/**
 * The claims of the loops that share the `runs` table with the watch, beside 10 000 running jobs the watch holds:
 *
 *   npm run bench:claims                 # embedded PGlite
 *   npm run bench:claims -- --postgres   # a scratch database on ORCHESTRATOR_TEST_POSTGRES_URL
 *
 * The start loop, the service controller and the nodes controller each claim their due rows (store/leases.ts#claimDue)
 * with their own condition. 10 000 running tasks are held by another server with their `next_reconcile_at` passed (as an
 * overloaded watch leaves them until it renews their leases), beside 500 running services, 20 multi-node tasks and 20
 * runs provisioning, all due, then again with none of those due (the steady state: most claims find nothing). It prints
 * the median time of each claim (given back after each), then the same with the indexes of migration 28 dropped: the
 * reference, as the claims ran before it. The database is not analysed, as the embedded one never is.
 */
import type { Db } from '../store/db.js';
import { claimDue, releaseLeases } from '../store/leases.js';
import { MULTI_NODE_PARENT } from '../store/nodes.js';
import { openDatabase } from '../store/open.js';
import { SERVICE_PARENT } from '../store/services.js';
import { createScratchDatabase } from '../test/helpers/databases.js';
import { median } from './quantiles.js';
import { runCopier } from './run-copies.js';

const HELD = 10_000;
const usePostgres = process.argv.includes('--postgres');
const CLAIMS = {
  'start loop (provisioning runs)': `status = 'provisioning' AND NOT ${SERVICE_PARENT} AND NOT ${MULTI_NODE_PARENT}`,
  'service controller (services)': `${SERVICE_PARENT} AND status NOT IN ('pending', 'terminated', 'failed', 'done')`,
  'nodes controller (multi-node tasks)': `${MULTI_NODE_PARENT} AND status IN ('provisioning', 'running', 'terminating')`,
};
const MIGRATION_28_INDEXES = ['runs_provisioning_due', 'runs_service_parents_due', 'runs_multi_node_parents_due'];

async function fill(db: Db): Promise<void> {
  const copies = await runCopier(db);
  const due = { next_reconcile_at: new Date(Date.now() - 60_000) };
  await copies(HELD, 'held-', { ...due, status: 'running', lease_owner: 'another-server', lease_expires_at: new Date(Date.now() + 3_600_000) });
  await copies(500, 'service-', { ...due, status: 'running', kind: 'service', spec: { type: 'service', port: 80, commands: ['true'] } });
  await copies(20, 'nodes-', { ...due, status: 'running', spec: { type: 'task', nodes: 2, commands: ['true'] } });
  await copies(20, 'provisioning-', { ...due, status: 'provisioning' });
}

async function medians(db: Db): Promise<Map<string, { ms: number; rows: number }>> {
  const figures = new Map<string, { ms: number; rows: number }>();
  for (const [name, where] of Object.entries(CLAIMS)) {
    const times: number[] = [];
    let rows = 0;
    for (let i = 0; i < 11; i++) {
      const started = performance.now();
      const claimed = await claimDue(db, 'runs', 'bench', 15_000, 64, where);
      times.push(performance.now() - started);
      rows = claimed.length;
      await releaseLeases(db, 'runs', 'bench', claimed.map((row) => ({ id: row.id as string, nextInMs: 0 })));
    }
    figures.set(name, { ms: median(times), rows });
  }
  return figures;
}

const scratch = usePostgres ? await createScratchDatabase() : null;
const db = await openDatabase({ url: scratch?.url });
try {
  console.log(`# claims beside ${HELD} running jobs another server holds (${db.driver})`);
  await fill(db);
  const dueIn = (sql: string) => db.query(`UPDATE runs SET next_reconcile_at = now() + interval '${sql}' WHERE lease_owner IS NULL`);
  const figures = async () => {
    await dueIn('-1 minute');
    const due = await medians(db);
    await dueIn('1 hour');
    return { due, none: await medians(db) };
  };
  const indexed = await figures();
  for (const index of MIGRATION_28_INDEXES) await db.exec(`DROP INDEX ${index}`);
  const before = await figures();
  for (const name of Object.keys(CLAIMS)) {
    const line = (now: { ms: number; rows: number }, reference: { ms: number }) =>
      `${now.ms.toFixed(2)} ms (${now.rows} rows), without migration 28's indexes ${reference.ms.toFixed(2)} ms (ratio ${(reference.ms / now.ms).toFixed(1)}x)`;
    console.log(`${name}, median of 11: its rows due ${line(indexed.due.get(name)!, before.due.get(name)!)}; none due ${line(indexed.none.get(name)!, before.none.get(name)!)}`);
  }
} finally {
  await db.close();
  await scratch?.drop();
}
