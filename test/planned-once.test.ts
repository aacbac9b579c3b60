import { expect } from 'chai';
import { plannedOnce, PLANNED_ONCE, type Db, type Queryable } from '../store/db.js';
import { getFleetById } from '../store/fleets.js';
import { giveInstanceTo } from '../store/instances.js';
import { releaseLease, updateLeased } from '../store/leases.js';
import { migrate } from '../store/migrations.js';
import { getProject, getProjectById, upsertProject, upsertUser, userByToken } from '../store/projects.js';
import { markPlaced } from '../store/run-queue.js';
import { getRunView } from '../store/run-views.js';
import { getRun, insertRun, writeRunStep } from '../store/runs.js';
import { openScratchDb } from './helpers/databases.js';

/**
 * The embedded database plans each statement with its values at every run, and only those marked `plannedOnce` once,
 * for good (store/pglite-statements.ts): a plan kept from a table's first, small size must still find rows by their keys
 * once the table holds thousands.
 */
describe('statements planned once on the embedded database', function () {
  this.timeout(60_000);
  let db: Db;
  let close: () => Promise<void>;
  const mode = async (sql: string) => (await db.query<{ mode: string }>(sql))[0].mode;
  const SETTING = "SELECT current_setting('plan_cache_mode') AS mode";

  before(async () => {
    ({ db, close } = await openScratchDb('pglite'));
    await migrate(db);
  });
  after(() => close());

  it('runs a marked statement with a generic plan and any other with its values, also after a rollback or a failed statement', async () => {
    expect(await mode(SETTING)).to.equal('force_custom_plan');
    expect(await mode(plannedOnce(SETTING))).to.equal('force_generic_plan');
    expect(await mode(SETTING)).to.equal('force_custom_plan');
    // A transaction that set it for a marked statement and was rolled back took the setting with it.
    const rolledBack = await db.transaction(async (tx) => {
      expect(await tx.query(plannedOnce(SETTING))).to.deep.equal([{ mode: 'force_generic_plan' }]);
      throw new Error('rolled back');
    }).catch((error: Error) => error.message);
    expect(rolledBack).to.equal('rolled back');
    expect(await mode(plannedOnce(SETTING))).to.equal('force_generic_plan');
    expect(await mode(SETTING)).to.equal('force_custom_plan');
    // So did a failed statement's own (implicit) transaction.
    const failed = await db.query(plannedOnce('SELECT 1 / 0')).catch((error: Error) => error.message);
    expect(failed).to.include('division by zero');
    expect(await mode(plannedOnce(SETTING))).to.equal('force_generic_plan');
    const failedAfterCustom = await db.query(plannedOnce('SELECT 1 / 0')).catch((error: Error) => error.message);
    expect(failedAfterCustom).to.include('division by zero');
    expect(await mode(SETTING)).to.equal('force_custom_plan');
    expect(await mode(plannedOnce(SETTING))).to.equal('force_generic_plan');
  });

  it('plans every statement so marked to find its rows by their keys, with no table read whole', async () => {
    const marked = new Set<string>();
    const recording: Queryable = {
      query: (sql, params) => {
        if (sql.endsWith(PLANNED_ONCE)) marked.add(sql);
        return db.query(sql, params);
      },
    };
    const project = await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }]);
    const user = await upsertUser(db, 'u', 'u-token-0123456789', 'admin');
    const event = { projectId: project.id, objectKind: 'run' as const, objectId: 'r', objectName: 'r', reason: 'test', message: 'm' };
    const run = await insertRun(recording, {
      projectId: project.id, userId: user.id, name: 'planned', kind: 'task', spec: { type: 'task', commands: ['true'] }, files: [],
      requirement: {} as never, priority: 0, event: { reason: 'submitted', message: 'm' },
    });
    const runId = run!.id;
    // One after another, each failure (an id that is not there) caught as it comes: only the statements' texts matter.
    const attempts: (() => Promise<unknown>)[] = [
      () => getRun(recording, runId),
      () => getRunView(recording, runId),
      () => getProject(recording, 'main'),
      () => getProjectById(recording, project.id),
      () => userByToken(recording, 'u-token-0123456789'),
      () => getFleetById(recording, 'no-fleet'),
      () => giveInstanceTo(recording, 'no-instance', runId, true),
      () => giveInstanceTo(recording, 'no-instance', runId, false),
      () => markPlaced(recording, runId, { message: 'm', fleetId: 'f', instanceId: 'i', blocks: null }, { owner: 'o', ms: 1000 }, event),
      () => writeRunStep(recording, runId, 'o', { status: 'done', finished_at: new Date() }, event, { releaseInstance: 'no-instance' }),
      () => writeRunStep(recording, runId, 'o', { status: 'running' }, event, { handOver: true }),
      () => updateLeased(recording, 'instances', 'no-instance', 'o', { status: 'idle' }),
      () => releaseLease(recording, 'runs', runId, 'o', 1000),
    ];
    for (const attempt of attempts) await attempt().catch(() => undefined);
    expect(marked.size).to.be.at.least(attempts.length);
    const wrong: string[] = [];
    for (const sql of marked) {
      const parameters = Math.max(0, ...[...sql.matchAll(/\$(\d+)/g)].map((m) => Number(m[1])));
      await db.query(`PREPARE planned_once_check AS ${sql}`);
      try {
        const args = parameters ? `(${Array(parameters).fill('NULL').join(', ')})` : '';
        const plan = (await db.query<{ 'QUERY PLAN': string }>(plannedOnce(`EXPLAIN EXECUTE planned_once_check${args}`))).map((row) => row['QUERY PLAN']).join('\n');
        if (parameters && !plan.includes('$1')) wrong.push(`not a generic plan (no parameter in it):\n${sql}\n${plan}`);
        if (/Seq Scan/.test(plan)) wrong.push(`a table read whole:\n${sql}\n${plan}`);
      } finally {
        await db.query('DEALLOCATE planned_once_check');
      }
    }
    expect(wrong, wrong.join('\n\n')).to.deep.equal([]);
  });
});
