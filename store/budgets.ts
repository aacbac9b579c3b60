import type { ResourceRequirement } from '../api/resources.js';
import { budgetPeriod, budgetSpentReason, completeBudget, type Budget, type BudgetView } from '../api/costs.js';
import type { Queryable } from './db.js';
import { recordEvent } from './events.js';
import { projectBurn, projectSpent } from './ledger.js';

export type BudgetSource = 'config' | 'api';

export interface BudgetRecord {
  projectId: string;
  projectName: string;
  budget: Required<Budget>;
  source: BudgetSource;
  /** Dollars spent in `periodStart`'s period, as the budget controller last counted them. */
  spent: number;
  periodStart: Date | null;
}

const toBudget = (r: Record<string, any>): BudgetRecord => ({
  projectId: r.project_id, projectName: r.project_name,
  budget: { amount: r.amount, period: r.period, on_exceed: r.on_exceed, alerts: r.alerts },
  source: r.source, spent: r.spent, periodStart: r.period_start,
});

const SELECT_BUDGETS = `SELECT b.*, p.name AS project_name FROM project_budgets b JOIN projects p ON p.id = b.project_id`;

export async function getBudget(db: Queryable, projectId: string): Promise<BudgetRecord | null> {
  const [row] = await db.query(`${SELECT_BUDGETS} WHERE b.project_id = $1`, [projectId]);
  return row ? toBudget(row) : null;
}

export async function listBudgets(db: Queryable): Promise<BudgetRecord[]> {
  return (await db.query(`${SELECT_BUDGETS} ORDER BY p.name`)).map(toBudget);
}

/** Sets the project's budget (a valid one: api/costs.ts#budgetProblems found nothing); the spend counted so far stays. */
export async function setBudget(db: Queryable, projectId: string, budget: Budget, source: BudgetSource): Promise<void> {
  const full = completeBudget(budget);
  await db.query(
    `INSERT INTO project_budgets (project_id, amount, period, on_exceed, alerts, source) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (project_id) DO UPDATE SET amount = excluded.amount, period = excluded.period, on_exceed = excluded.on_exceed,
       alerts = excluded.alerts, source = excluded.source, updated_at = now()`,
    [projectId, full.amount, full.period, full.on_exceed, full.alerts, source]);
}

/** config.yml at start-up: its budgets replace what is stored; one that config.yml set before and no longer gives is removed. */
export async function applyConfigBudget(db: Queryable, projectId: string, budget: Budget | undefined): Promise<void> {
  if (budget) await setBudget(db, projectId, budget, 'config');
  else await db.query(`DELETE FROM project_budgets WHERE project_id = $1 AND source = 'config'`, [projectId]);
}

export async function deleteBudget(db: Queryable, projectId: string): Promise<boolean> {
  return (await db.query(`DELETE FROM project_budgets WHERE project_id = $1 RETURNING project_id`, [projectId])).length > 0;
}

export async function recordSpent(db: Queryable, projectId: string, spent: number, periodStart: Date): Promise<void> {
  await db.query(`UPDATE project_budgets SET spent = $2, period_start = $3 WHERE project_id = $1`, [projectId, spent, periodStart]);
}

/** This period's spend as last counted: nothing yet when the count is of an earlier period. */
export function spentThisPeriod(record: BudgetRecord, now: Date): { spent: number; start: Date; end: Date } {
  const { start, end } = budgetPeriod(record.budget.period, now);
  return { spent: record.periodStart && record.periodStart.getTime() === start.getTime() ? record.spent : 0, start, end };
}

/**
 * Records the project's event `reason` for `percent` once per period, across restarts and servers: the notice row and the
 * event are written together or not at all. True when this call wrote them.
 */
export async function noticeOnce(db: Queryable, e: { projectId: string; projectName: string; periodStart: Date; reason: 'BudgetAlert' | 'BudgetExceeded'; percent: number; message: string }): Promise<boolean> {
  const inserted = await db.query(
    `INSERT INTO budget_notices (project_id, period_start, reason, percent) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING project_id`,
    [e.projectId, e.periodStart, e.reason, e.percent]);
  if (inserted.length === 0) return false;
  await recordEvent(db, { projectId: e.projectId, objectKind: 'project', objectId: e.projectId, objectName: e.projectName, reason: e.reason, message: e.message });
  return true;
}

/**
 * Asks every running run of the project to stop for its budget (services drain their replicas first); the controllers end
 * them with termination reason budget_exceeded. Returns how many were asked.
 */
export async function stopRunsForBudget(db: Queryable, projectId: string): Promise<number> {
  const rows = await db.query(
    `UPDATE runs SET desired = 'stop', termination_reason = 'budget_exceeded', next_reconcile_at = now(), updated_at = now()
     WHERE project_id = $1 AND service_id IS NULL AND desired = 'run' AND status IN ('provisioning', 'running') RETURNING id`, [projectId]);
  return rows.length;
}

/**
 * The project's budget when it is spent this period and acts (on_exceed stop_new or stop_all), with the queue reason that
 * says so; null when it lets new instances start.
 */
export async function actingSpentBudget(db: Queryable, projectId: string, now = new Date()): Promise<(BudgetRecord & { reason: string }) | null> {
  const record = await getBudget(db, projectId);
  if (!record || record.budget.on_exceed === 'warn') return null;
  const { spent, end } = spentThisPeriod(record, now);
  return spent >= record.budget.amount ? { ...record, reason: budgetSpentReason(record.budget, spent, 0, end) } : null;
}

/** The project's instances that cost money now or soon (all but terminated ones), with their price once an offer is chosen. */
export async function liveInstancePrices(db: Queryable, projectId: string): Promise<{ fleetId: string; requirement: ResourceRequirement; pricePerHour: number | null }[]> {
  const rows = await db.query(
    `SELECT fleet_id, requirement, (offer->>'pricePerHour')::float8 AS price FROM instances WHERE project_id = $1 AND status <> 'terminated'`, [projectId]);
  return rows.map((r) => ({ fleetId: r.fleet_id, requirement: r.requirement, pricePerHour: r.price }));
}

/** The project's budget as the API answers it, with this period's spend counted from the ledger now. */
export async function budgetView(db: Queryable, project: { id: string; name: string }, now = new Date()): Promise<BudgetView> {
  const [record, burnPerHour] = await Promise.all([getBudget(db, project.id), projectBurn(db, project.id)]);
  if (!record) return { project: project.name, budget: null, source: null, periodStart: null, periodEnd: null, spent: 0, burnPerHour, holding: null };
  const { start, end } = budgetPeriod(record.budget.period, now);
  const spent = await projectSpent(db, project.id, start);
  const holding = record.budget.on_exceed !== 'warn' && spent >= record.budget.amount ? budgetSpentReason(record.budget, spent, 0, end) : null;
  return {
    project: project.name, budget: record.budget, source: record.source, periodStart: start.toISOString(), periodEnd: end.toISOString(), spent, burnPerHour, holding,
  };
}
