import { expect } from 'chai';
import type { Db } from '../store/db.js';
import { accrue, accrueAll } from '../store/ledger.js';
import { openDatabase } from '../store/open.js';
import { upsertProject } from '../store/projects.js';

const INSTANCES = 300;
const OFFER = { backend: 'gpucloud', offerId: 'h100-x1', gpu: { name: 'H100', memoryMib: 81920, count: 1 }, cpus: 26, memoryMib: 230400, diskMib: 1024000, region: 'us-east-1', pricePerHour: 2.5, availability: 'available' };

/**
 * Every count rewrites every open account and its instance's piece of the hour, and the embedded database has no
 * autovacuum: the rows must be rewritten in place, or the tables and their indexes grow by every instance at every count
 * for as long as the server runs. (On PostgreSQL, whether an old version can be pruned at once also depends on every
 * other session's snapshot, and autovacuum cleans up after it: sizes are not asserted there.)
 */
describe('the ledger\'s accounts on pglite', function () {
  this.timeout(120_000);
  let db: Db;

  before(async () => {
    db = await openDatabase({});
    const project = await upsertProject(db, 'main', [{ type: 'local' } as never]);
    await db.query(
      `INSERT INTO fleets (id, project_id, name, spec, requirement, nodes_min, nodes_max, backends, status)
       VALUES ('f-1', $1, 'h100', '{}', '{}', 0, NULL, '["gpucloud"]', 'active')`, [project.id]);
    await db.query(
      `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, offer, agent_token, status, provisioning_started_at)
       SELECT 'i-' || n, $1, 'f-1', 'h100-' || n, 'gpucloud', '{}', $2, 'token', 'busy', now() FROM generate_series(1, $3::int) n`,
      [project.id, OFFER, INSTANCES]);
    await db.query(
      `INSERT INTO instance_accruals (instance_id, price_per_hour, started_at, accrued_until) SELECT id, 2.5, now(), now() FROM instances`);
  });
  after(async () => {
    await db.close();
  });

  /** Bytes of the table and its indexes per row it holds (a count that crosses an hour adds a piece per instance). */
  const bytesPerRow = async (table: string) => (await db.query<{ bytes: number }>(
    `SELECT pg_total_relation_size('${table}')::float8 / count(*) AS bytes FROM ${table}`))[0]!.bytes;

  it('and hourly pieces keep their size however many counts rewrite them', async () => {
    expect(await accrue(db)).to.equal(INSTANCES);
    const afterFirst = { accounts: await bytesPerRow('instance_accruals'), pieces: await bytesPerRow('cost_hours') };
    for (let i = 0; i < 40; i++) expect(await accrue(db)).to.equal(INSTANCES);
    expect(await bytesPerRow('instance_accruals')).to.be.at.most(afterFirst.accounts * 1.25);
    expect(await bytesPerRow('cost_hours')).to.be.at.most(afterFirst.pieces * 1.25);
    const [account] = await db.query<{ seconds: number }>(`SELECT seconds FROM instance_accruals WHERE instance_id = 'i-1'`);
    expect(account!.seconds).to.be.greaterThan(0);
  });

  it('counts every account once when it counts a few at a time', async () => {
    const [{ last }] = await db.query<{ last: Date }>('SELECT max(accrued_until) AS last FROM instance_accruals');
    expect(await accrueAll(db, 7)).to.equal(INSTANCES);
    const [{ behind }] = await db.query<{ behind: number }>('SELECT count(*)::int AS behind FROM instance_accruals WHERE accrued_until <= $1', [last]);
    expect(behind).to.equal(0);
  });
});
