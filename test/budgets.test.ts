import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { BudgetView, CostReport } from '../api/costs.js';
import type { RunPlan } from '../api/objects.js';
import type { RunSpec } from '../api/spec.js';
import { renderRunPlan } from '../cli/plan.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { loadServerConfig } from '../server/config.js';
import { show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

const BUDGET_SPENT = /^budget spent: \$[\d.]+ of \$[\d.]+ today \(resets \d{4}-\d{2}-\d{2}\)$/;

async function budget(server: TestServer): Promise<BudgetView> {
  return (await server.api('GET', '/api/projects/main/budget')).body as BudgetView;
}

/** The project's events of `reason`, oldest first. */
async function projectEvents(server: TestServer, reason: string): Promise<string[]> {
  const { body } = await server.api('GET', '/api/projects/main/events?object=main');
  return (body as { reason: string; message: string }[]).filter((e) => e.reason === reason).map((e) => e.message);
}

const task = (name: string, seconds: number, gpu = 'L4') => `type: task\nname: ${name}\nresources:\n  gpu: ${gpu}\ncommands:\n  - sleep ${seconds}\n`;

for (const kind of DATABASE_KINDS) {
  describe(`budgets on ${kind}`, function () {
    this.timeout(120_000);
    let suite: GpucloudSuite;
    useGpucloudSuite(kind, (s) => { suite = s; });

    /**
     * Sets the budget through the CLI, `headroom` dollars above what the project has spent today and the next minute of
     * its instances (which the scheduler counts as committed).
     */
    async function budgetAbove(headroom: number, onExceed: string): Promise<number> {
      await suite.server.api('PUT', '/api/projects/main/budget', { amount: 1000, period: 'day' });
      const { body: live } = await suite.server.api('GET', '/api/projects/main/instances');
      const burn = (live as { pricePerHour: number | null }[]).reduce((sum, i) => sum + (i.pricePerHour ?? 0), 0);
      const amount = Number(((await budget(suite.server)).spent + burn / 60 + headroom).toFixed(4));
      const set = await suite.cli(['project', 'budget', 'set', '--amount', String(amount), '--period', 'day', '--on-exceed', onExceed, '--alerts', '100']);
      expect(set.code, show(set)).to.equal(0);
      return amount;
    }
    const spentAtLeast = (amount: number) => eventually(async () => (await budget(suite.server)).spent >= amount, 30_000, `$${amount} spent`);

    it('refuses a negative budget or an unknown period with a 400 and the CLI\'s exit 1, and keeps the budget it had', async () => {
      await budgetAbove(100, 'warn');
      const before = await budget(suite.server);
      const refused = await suite.server.api('PUT', '/api/projects/main/budget', { amount: -5, period: 'year' });
      expect(refused.status).to.equal(400);
      expect(refused.body.error.message).to.include('amount: expected dollars per period, a number of at least 0, got -5');
      expect(refused.body.error.message).to.include('period: expected one of day, week, month, got "year"');
      const cli = await suite.cli(['project', 'budget', 'set', '--amount', '10', '--period', 'fortnight']);
      expect(cli.code).to.equal(1);
      expect(cli.stderr).to.include('period: expected one of day, week, month, got "fortnight"');
      expect((await budget(suite.server)).budget).to.deep.equal(before.budget);
    });

    it('stop_new: holds the next run with the reason once spent, lets runs on running instances run, and releases it when raised', async () => {
      const amount = await budgetAbove(0.001, 'stop_new');
      await suite.apply('first', task('first', 120));
      await suite.waitFor('first', (run) => run.status === 'running', 'first running');
      await spentAtLeast(amount);
      await suite.apply('second', task('second', 1));
      const held = await suite.waitFor('second', (run) => BUDGET_SPENT.test(run.statusMessage), 'second held by the budget');
      expect(held.status).to.equal('submitted');
      const ps = await suite.cli(['ps']);
      expect(ps.stdout).to.match(/second .*budget spent: \$/);
      const third = { type: 'task', name: 'third', commands: ['true'], resources: { gpu: 'L4' } } as RunSpec;
      const { body: plan } = await suite.server.api('POST', '/api/projects/main/runs/plan', { spec: third });
      expect(plan.problem).to.match(BUDGET_SPENT);
      expect([plan.blocking, plan.pricePerHour, plan.budget.lastsFor]).to.deep.equal([null, 0.8, 'spent']);
      const shown = renderRunPlan(third, plan as RunPlan);
      expect(shown).to.match(/^ {2}price {8}\$0\.80\/h$/m);
      expect(shown).to.match(/^ {2}budget {7}\$[\d.]+ of \$0\.00\d+ per day spent: new instances wait until it resets or is raised/m);
      expect((await suite.run('first'))!.status).to.equal('running');
      expect((await projectEvents(suite.server, 'BudgetExceeded')).at(-1)).to.match(/budget is spent: .*no new instance starts until it resets or is raised$/);
      await budgetAbove(100, 'stop_new');
      await suite.waitFor('second', (run) => run.status === 'done', 'second done once the budget was raised');
      await suite.cli(['stop', 'first']);
    });

    it('stop_new: two runs applied together start one instance when a minute of both would overrun the budget', async () => {
      await suite.waitFor('first', (run) => run.status === 'terminated', 'first stopped');
      // A minute of the instances there are, and less than one minute of a new 2×L4 ($0.0267) above what is spent:
      // the first new instance fits, the second would not. (The idle 1×L4 instances cannot take these runs.)
      await budgetAbove(0.02, 'stop_new');
      writeFileSync(join(suite.work, 'pair.yml'), `${task('left', 30, 'L4:2')}---\n${task('right', 30, 'L4:2')}`);
      const applied = await suite.cli(['apply', '-f', join(suite.work, 'pair.yml'), '-y', '-d']);
      expect(applied.code, show(applied)).to.equal(0);
      const runs = await eventually(async () => {
        const pair = [await suite.run('left'), await suite.run('right')];
        return pair.every((run) => run && run.status !== 'submitted' || /^budget nearly spent: .* more committed to the next minute of its instances/.test(run!.statusMessage)) ? pair : null;
      }, 20_000, 'both runs placed or held');
      expect(runs.filter((run) => run!.status === 'submitted')).to.have.length(1);
      await suite.cli(['stop', 'left']);
      await suite.cli(['stop', 'right']);
      await suite.server.api('DELETE', '/api/projects/main/budget');
    });

    it('stop_all: stops the running run (budget_exceeded) and ends its instances, leaving none at the emulator', async () => {
      await eventually(async () => (await suite.cloudInstances()).every((i) => i.status !== 'provisioning'), 20_000, 'no instance starting');
      await suite.apply('doomed', task('doomed', 300));
      await suite.waitFor('doomed', (run) => run.status === 'running', 'doomed running');
      await suite.server.api('PUT', '/api/projects/main/budget', { amount: 1000, period: 'day' });
      const amount = Number(((await budget(suite.server)).spent + 0.002).toFixed(4));
      expect((await suite.server.api('PUT', '/api/projects/main/budget', { amount, period: 'day', on_exceed: 'stop_all' })).status).to.equal(200);
      await spentAtLeast(amount);
      const stopped = await suite.waitFor('doomed', (run) => run.status === 'terminated', 'doomed stopped by the budget');
      expect(stopped.terminationReason).to.equal('budget_exceeded');
      await eventually(async () => (await suite.cloudInstances()).every((i) => i.status === 'terminated' || i.status === 'failed'), 30_000, 'no instance left at the emulator');
      const fleet = await suite.cli(['fleet']);
      expect(fleet.stdout).to.not.match(/idle|busy/);
      await suite.server.api('DELETE', '/api/projects/main/budget');
    });

    it('orchestrator cost reports what each run and fleet cost, in a table and as JSON with the total', async () => {
      const json = await suite.cli(['cost', '--by', 'run', '--since', '1d', '--json']);
      expect(json.code, show(json)).to.equal(0);
      const report = JSON.parse(json.stdout) as CostReport;
      const doomed = report.rows.find((row) => row.name === 'doomed')!;
      expect(doomed.dollars).to.be.greaterThan(0);
      expect((await suite.run('doomed'))!.cost).to.be.closeTo(doomed.dollars, 1e-9);
      expect(report.total).to.be.closeTo(report.rows.reduce((sum, row) => sum + row.dollars, 0) + report.others.dollars, 1e-9);
      const table = await suite.cli(['cost', '--by', 'fleet', '--since', '1d']);
      expect(table.stdout).to.match(/^l4\s+\d+[sm]\s+\$0\.\d+$/m);
      expect(table.stdout).to.match(/^total \$0\.\d+ for project main from .* UTC$/m);
      const bad = await suite.cli(['cost', '--month', '2026-13']);
      expect([bad.code, bad.stderr]).to.deep.equal([1, 'error: --month: expected YYYY-MM, such as 2026-11, got "2026-13"\n']);
    });
  });

  describe(`budget alerts on ${kind}`, function () {
    this.timeout(120_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    const config = (url: string, key: string) => `${gpucloudConfig(url, key)}  budget:\n    amount: 0.003\n    period: day\n    on_exceed: warn\n    alerts: [25, 50, 100]\n`;
    before(async () => {
      emulator = await startEmulator({ port: 0, bootDelayMs: 100 });
      server = await startTestServer(kind, config(emulator.url, emulator.apiKey), { ledgerIntervalMs: 200 });
    });
    after(async () => {
      await server.stop();
      await emulator.close();
    });

    it('records each threshold once per period, across a restart, and config.yml\'s budget wins over the API\'s at the restart', async () => {
      expect((await budget(server)).source).to.equal('config');
      await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'h100', backends: ['gpucloud'], nodes: 1, resources: { gpu: 'H100:1' } } });
      await eventually(async () => (await projectEvents(server, 'BudgetExceeded')).length === 1, 40_000, 'the budget spent');
      const alerts = await projectEvents(server, 'BudgetAlert');
      expect(alerts).to.have.length(3);
      // The spend is read each second, so under load the first alert may see more than 25% of it already spent.
      expect(alerts[0]).to.match(/^25% of the \$0\.003 day budget spent: \$0\.00(0[789]|[1-9])\d*$/);
      expect(alerts[2]).to.match(/^100% of the \$0\.003 day budget spent: \$0\.00[3-9]\d*$/);
      const changed = await server.api('PUT', '/api/projects/main/budget', { amount: 0.001, period: 'day', alerts: [25, 50, 100] });
      expect(changed.body.source).to.equal('api');

      await server.restart();
      const restored = await budget(server);
      expect([restored.source, restored.budget!.amount]).to.deep.equal(['config', 0.003]);
      await new Promise((r) => setTimeout(r, 2000));
      expect(await projectEvents(server, 'BudgetAlert')).to.have.length(3);
      expect(await projectEvents(server, 'BudgetExceeded')).to.have.length(1);
      await server.api('DELETE', '/api/projects/main/fleets/h100');
      await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.length === 0, 30_000, 'the instance gone');
    });

    it('refuses a config.yml budget with a negative amount or an unknown period, naming the line and field', () => {
      const file = join(server.dir, 'bad.yml');
      writeFileSync(file, `projects:\n- name: main\n  backends: []\n  budget:\n    amount: -5\n    period: year\n`);
      expect(() => loadServerConfig(file)).to.throw(/bad\.yml:5:\d+: projects\[0\]\.budget\.amount: expected dollars per period, a number of at least 0, got -5\n.*bad\.yml:6:\d+: projects\[0\]\.budget\.period: expected one of day, week, month, got "year"/);
    });
  });
}
