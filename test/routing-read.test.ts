import { expect } from 'chai';
import { runCopier } from '../bench/run-copies.js';
import type { Db, Queryable } from '../store/db.js';
import { migrate } from '../store/migrations.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { insertRun } from '../store/runs.js';
import { loadRoutingTable } from '../store/services.js';
import { openScratchDb } from './helpers/databases.js';

const ACTIVE_TASKS = 3_000;

/**
 * The routing table is read every second and at every change of a service's runs. On the embedded database, which is
 * never analysed, its replicas were found by filtering every active run (bench/README.md, "The routing table's
 * replicas read by their own index"); they must come from the index of replicas in rotation however many runs are
 * active.
 */
describe('the routing table read beside thousands of active runs (embedded database)', function () {
  this.timeout(120_000);
  let db: Db;
  let close: () => Promise<void>;

  before(async () => {
    ({ db, close } = await openScratchDb('pglite'));
    await migrate(db);
  });
  after(() => close());

  it('publishes only ready replicas in rotation, each with its own spec\'s port, read through runs_in_rotation', async () => {
    const copies = await runCopier(db);
    const project = await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }]);
    const user = await upsertUser(db, 'owner', 'owner-token-0123456789', 'admin');
    const web = await insertRun(db, { projectId: project.id, userId: user.id, name: 'web', kind: 'service', spec: { type: 'service', port: 8000, commands: ['serve'] }, files: [], requirement: {} as never, priority: 0 });
    await db.query(`UPDATE runs SET status = 'running' WHERE id = $1`, [web!.id]);
    await db.exec('SET session_replication_role = replica');
    await db.query(
      `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, agent_token, status, agent_url)
       SELECT 'i' || g, $1, 'f', 'i' || g, 'local', '{}'::jsonb, 't', 'busy', 'http://agent-' || g FROM generate_series(1, 2) g`, [project.id]);
    const soon = new Date(Date.now() + 1_000);
    await copies(ACTIVE_TASKS, 'task-', { status: 'running', instance_id: 'i1', next_reconcile_at: soon });
    const replica = (port: number, fields: Record<string, unknown>) => ({
      status: 'running', service_id: web!.id, instance_id: 'i2', spec: { type: 'service', port, commands: ['serve'] }, next_reconcile_at: soon, ...fields,
    });
    await copies(1, 'ready-', replica(8000, { replica: 0, ready_at: new Date() }));
    await copies(1, 'next-generation-', replica(8001, { replica: 1, ready_at: new Date() }));
    await copies(1, 'starting-', replica(8000, { replica: 2 }));
    await copies(1, 'draining-', replica(8000, { replica: 3, ready_at: new Date(), draining_since: new Date() }));
    await db.exec('SET session_replication_role = origin');
    await db.exec('VACUUM runs');

    const statements: Array<{ sql: string; params?: unknown[] }> = [];
    const recording: Queryable = { query: (sql, params) => (statements.push({ sql, params }), db.query(sql, params)) };
    const [route] = await loadRoutingTable(recording);
    expect(route!.run).to.equal('web');
    expect(route!.replicas.map((r) => [r.id, r.port, r.agentUrl])).to.deep.equal([['ready-1', 8000, 'http://agent-2'], ['next-generation-1', 8001, 'http://agent-2']]);

    const replicaRead = statements.find(({ sql }) => sql.includes('ready_at IS NOT NULL'))!;
    const plan = (await db.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${replicaRead.sql}`, replicaRead.params)).map((row) => row['QUERY PLAN']).join('\n');
    expect(plan).to.include('runs_in_rotation');
    expect(plan).to.not.match(/Seq Scan on runs|runs_active_due/);
  });
});
