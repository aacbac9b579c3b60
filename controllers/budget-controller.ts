import type { Logger } from 'winston';
import { budgetAlertMessage, budgetPeriod } from '../api/costs.js';
import { formatDollars } from '../api/offer.js';
import { listBudgets, noticeOnce, recordSpent, stopRunsForBudget, type BudgetRecord } from '../store/budgets.js';
import { CHANNELS } from '../store/channels.js';
import type { Db } from '../store/db.js';
import { projectSpent } from '../store/ledger.js';
import type { Controller } from './manager.js';

/**
 * Holds each project to its budget: counts this period's spend from the ledger (for the scheduler's gate), records a
 * BudgetAlert event at each threshold and a BudgetExceeded event once spent, each once per period, and with on_exceed
 * stop_all stops the project's running runs (their instances then end, see the instance controller).
 */
export class BudgetController implements Controller {
  readonly name = 'budget';
  // Not the runs' channel: spend moves with the ledger's counts, which the one-second interval follows, and a run's
  // change would make every budget be counted again for nothing.
  readonly channel = CHANNELS.budgets;

  constructor(private readonly db: Db, private readonly logger: Logger) {}

  async pass(): Promise<void> {
    for (const record of await listBudgets(this.db)) await this.check(record, new Date());
  }

  private async check(record: BudgetRecord, now: Date): Promise<void> {
    const { budget, projectId, projectName } = record;
    const { start } = budgetPeriod(budget.period, now);
    const spent = await projectSpent(this.db, projectId, start);
    await recordSpent(this.db, projectId, spent, start);
    const notice = { projectId, projectName, periodStart: start };
    for (const percent of budget.alerts.filter((p) => spent >= (budget.amount * p) / 100)) {
      await this.db.transaction((tx) => noticeOnce(tx, { ...notice, reason: 'BudgetAlert', percent, message: budgetAlertMessage(budget, percent, spent) }));
    }
    if (spent < budget.amount) return;
    const message = `the ${formatDollars(budget.amount)} ${budget.period} budget is spent: ${formatDollars(spent)}; ${
      budget.on_exceed === 'warn' ? 'nothing is stopped (on_exceed: warn)' : budget.on_exceed === 'stop_new' ? 'no new instance starts until it resets or is raised' : 'running work stops and its instances end'}`;
    if (await this.db.transaction((tx) => noticeOnce(tx, { ...notice, reason: 'BudgetExceeded', percent: 100, message }))) {
      this.logger.warn(`project ${projectName}: ${message}`);
    }
    if (budget.on_exceed !== 'stop_all') return;
    if (await stopRunsForBudget(this.db, projectId) > 0) await this.db.notify(CHANNELS.runs);
    await this.db.notify(CHANNELS.instances);
  }
}
