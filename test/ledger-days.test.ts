import { expect } from 'chai';
import { COST_GROUPS, type CostReport } from '../api/costs.js';
import type { Db } from '../store/db.js';
import { accrue, costReport, projectSpent, rollAllDays, rollDays } from '../store/ledger.js';
import { openDatabase } from '../store/open.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';

const REQUIREMENT = { gpu: { models: ['H100'], memoryMib: { min: null, max: null }, count: { min: 1, max: 1 } }, cpus: { min: null, max: null }, memoryMib: { min: null, max: null }, diskMib: { min: null, max: null }, shmSizeMib: null };
const OFFER = { backend: 'gpucloud', offerId: 'h100-x1', gpu: { name: 'H100', memoryMib: 81920, count: 1 }, cpus: 26, memoryMib: 230400, diskMib: 1024000, region: 'us-east-1', pricePerHour: 2.5, availability: 'available' };
const HOUR = 3_600_000;
const at = (iso: string) => new Date(iso);

/**
 * Reports read whole UTC days from the ledger's daily sums (and the pieces not yet rolled into them) and only the hours
 * at either end of the window from its hourly pieces: whatever the window, and whatever has been rolled, a report must be
 * what the hourly pieces alone say.
 */
for (const kind of DATABASE_KINDS) {
  describe(`cost reports from the ledger's daily sums on ${kind}`, function () {
    this.timeout(60_000);
    let db: Db;
    let drop: (() => Promise<void>) | undefined;
    let project: { id: string; name: string };

    before(async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : undefined;
      drop = scratch?.drop;
      db = await openDatabase({ url: scratch?.url });
      project = await upsertProject(db, 'main', [{ type: 'local' } as never]);
      const alice = await upsertUser(db, 'alice', 'alice-token-0123456789', 'user');
      const bob = await upsertUser(db, 'bob', 'bob-token-0123456789ab', 'user');
      await db.query(
        `INSERT INTO fleets (id, project_id, name, spec, requirement, nodes_min, nodes_max, backends, status)
         VALUES ('f-1', $1, 'h100', '{}', $2, 0, NULL, '["gpucloud"]', 'active')`, [project.id, REQUIREMENT]);
      await db.query(
        `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, offer, agent_token, status, provisioning_started_at)
         SELECT 'i-' || n, $1, 'f-1', 'h100-' || n, 'gpucloud', $2, $3, 'token', 'busy', now() FROM generate_series(1, 3) n`, [project.id, REQUIREMENT, OFFER]);
      // The first instance's account is closed; the second's counted up to 10:30 on Nov 1, so that hour and later are not done with.
      await db.query(
        `INSERT INTO instance_accruals (instance_id, price_per_hour, started_at, accrued_until, closed)
         VALUES ('i-1', 2.5, '2026-10-29T20:00Z', '2026-11-02T06:30Z', true), ('i-2', 2.5, '2026-10-29T20:00Z', '2026-11-01T10:30Z', false)`);
      // train ran twice (a retry keeps the name), each time on the first instance; eval on the second.
      await db.query(
        `INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status, fleet_id, instance_id, deleted)
         VALUES ('r-train-1', $1, $2, 'train', 'task', '{}', $4, 'failed', 'f-1', 'i-1', true), ('r-train-2', $1, $2, 'train', 'task', '{}', $4, 'done', 'f-1', 'i-1', false),
                ('r-eval', $1, $3, 'eval', 'task', '{}', $4, 'done', 'f-1', 'i-2', false)`, [project.id, alice.id, bob.id, REQUIREMENT]);
      // Four days of the fleet's time on both instances, two hours (one hour each) of train, an hour of eval.
      await addPieces(`SELECT 'i-' || n, '', h FROM generate_series(1, 2) n, generate_series('2026-10-29T20:00Z'::timestamptz, '2026-11-02T06:00Z', interval '1 hour') h`, 600);
      await addPieces(`VALUES ('i-1', 'r-train-1', '2026-10-30T23:00Z'::timestamptz), ('i-1', 'r-train-2', '2026-11-01T10:00Z'), ('i-2', 'r-eval', '2026-10-31T03:00Z')`, 3000);
    });
    after(async () => {
      await db.close();
      await drop?.();
    });

    /** Adds `seconds` of H100 time to each (instance, holder, hour) the query gives, to pieces already there or as new ones. */
    async function addPieces(query: string, seconds: number): Promise<void> {
      await db.query(
        `INSERT INTO cost_hours (instance_id, run_id, hour, project_id, seconds, dollars)
         SELECT p.*, $1, $2::float8, $2 * 2.5 / 3600 FROM (${query}) p
         ON CONFLICT ON CONSTRAINT cost_hours_pkey DO UPDATE SET seconds = cost_hours.seconds + excluded.seconds, dollars = cost_hours.dollars + excluded.dollars`,
        [project.id, seconds]);
    }

    /** Each group's dollars in [since, until) summed from the hourly pieces alone. */
    async function fromHours(by: string, since: Date, until: Date): Promise<Record<string, number>> {
      const name: Record<string, string> = { project: 'p.name', user: `coalesce(u.name, '-')`, run: `coalesce(r.name, '-')`, fleet: 'f.name', backend: 'i.backend' };
      const rows = await db.query<{ name: string; dollars: number }>(
        `SELECT ${name[by]} AS name, sum(c.dollars)::float8 AS dollars
         FROM cost_hours c JOIN projects p ON p.id = c.project_id JOIN instances i ON i.id = c.instance_id JOIN fleets f ON f.id = i.fleet_id
           LEFT JOIN runs r ON r.id = c.run_id AND c.run_id <> '' LEFT JOIN users u ON u.id = r.user_id
         WHERE c.project_id = $1 AND c.hour >= date_trunc('hour', $2::timestamptz) AND c.hour < $3 GROUP BY 1`, [project.id, since, until]);
      return Object.fromEntries(rows.map((r) => [r.name, r.dollars]));
    }

    const windows: [string, Date, Date][] = [
      ['a calendar month', at('2026-10-01T00:00Z'), at('2026-11-01T00:00Z')],
      ['the next month', at('2026-11-01T00:00Z'), at('2026-12-01T00:00Z')],
      ['whole days', at('2026-10-29T00:00Z'), at('2026-11-03T00:00Z')],
      ['part days at both ends', at('2026-10-30T05:30Z'), at('2026-11-01T10:20Z')],
      ['hours within one day', at('2026-10-31T02:00Z'), at('2026-10-31T09:00Z')],
      ['hours across one midnight', at('2026-10-30T22:00Z'), at('2026-10-31T01:00Z')],
    ];

    async function expectReportsFromHours(cases = windows): Promise<void> {
      for (const [label, since, until] of cases) {
        for (const by of COST_GROUPS) {
          const report: CostReport = await costReport(db, project, by, since, until, 0);
          const expected = await fromHours(by, since, until);
          const got = Object.fromEntries(report.rows.map((r) => [r.name, r.dollars]));
          expect(Object.keys(got).sort(), `${label} by ${by}`).to.deep.equal(Object.keys(expected).sort());
          for (const [name, dollars] of Object.entries(expected)) expect(got[name], `${label} by ${by}: ${name}`).to.be.closeTo(dollars, 1e-9);
          expect(report.total, `${label} by ${by}: total`).to.be.closeTo(Object.values(expected).reduce((a, b) => a + b, 0), 1e-9);
        }
        // What a budget period starting then has spent so far.
        const sinceThen = Object.values(await fromHours('project', since, new Date('9999-01-01T00:00Z'))).reduce((a, b) => a + b, 0);
        expect(await projectSpent(db, project.id, since), `${label}: spent since`).to.be.closeTo(sinceThen, 1e-9);
      }
    }

    it('reports each window, whole days or not, as the hourly pieces say, a retried run\'s time under its one name', async () => {
      await expectReportsFromHours();
      expect(await rollAllDays(db, 1)).to.equal(2);
      expect(await rollDays(db)).to.equal(0);
      await expectReportsFromHours();
      const october = await costReport(db, project, 'run', at('2026-10-01T00:00Z'), at('2026-11-01T00:00Z'), 0);
      expect(october.rows.find((r) => r.name === 'train')!.seconds).to.equal(3000);
      const november = await costReport(db, project, 'run', at('2026-11-01T00:00Z'), at('2026-12-01T00:00Z'), 0);
      expect(november.rows.find((r) => r.name === 'train')!.seconds).to.equal(3000);
    });

    it('reports the hours an open account is not done with from the pieces, as counts add to them, and their days once done', async () => {
      await addPieces(`SELECT 'i-2', '', h FROM generate_series('2026-11-01T10:00Z'::timestamptz, '2026-11-02T06:00Z', interval '1 hour') h`, 300);
      await expectReportsFromHours();
      await db.query(`UPDATE instance_accruals SET accrued_until = '2026-11-03T00:00Z', closed = true WHERE instance_id = 'i-2'`);
      expect(await rollDays(db)).to.equal(1);
      await expectReportsFromHours();
      const [unrolled] = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM instance_accruals WHERE rolled_until <> 'infinity'`);
      expect(unrolled!.n).to.equal(0);
    });

    it('keeps the days in step with the ledger\'s own counts of instances held by runs', async () => {
      const now = Date.now();
      const lastTwoDays: [string, Date, Date][] = [['the last two days', new Date(now - 48 * HOUR), new Date(now + HOUR)]];
      await db.query(`UPDATE instances SET run_id = 'r-eval' WHERE id = 'i-3'`);
      await db.query(
        `INSERT INTO instance_accruals (instance_id, price_per_hour, started_at, accrued_until) VALUES ('i-3', 2.5, $1, $1)`, [new Date(now - 30 * HOUR)]);
      expect(await accrue(db)).to.equal(1);
      expect(await rollDays(db)).to.equal(1);
      await expectReportsFromHours(lastTwoDays);
      expect(await accrue(db)).to.equal(1);
      await db.query(`UPDATE instances SET run_id = NULL WHERE id = 'i-3'`);
      await expectReportsFromHours(lastTwoDays);
      await rollDays(db);
      const report = await costReport(db, project, 'run', new Date(now - 48 * HOUR), new Date(now + HOUR), 0);
      expect(report.rows.find((r) => r.name === 'eval')!.seconds).to.be.within(30 * 3600, 30 * 3600 + 60);
    });
  });
}
