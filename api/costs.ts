import { Type, type Static } from '@sinclair/typebox';
import { formatDollars } from './offer.js';

/** Money: what the ledger reports and the budget a project may spend (docs/costs.md). */

export const BUDGET_PERIODS = ['day', 'week', 'month'] as const;
export type BudgetPeriod = typeof BUDGET_PERIODS[number];
export const ON_EXCEED = ['warn', 'stop_new', 'stop_all'] as const;
export type OnExceed = typeof ON_EXCEED[number];
export const DEFAULT_ALERTS = [50, 80, 100];

export const Budget = Type.Object({
  /** Dollars per period. */
  amount: Type.Number({ minimum: 0 }),
  period: Type.Union(BUDGET_PERIODS.map((p) => Type.Literal(p))),
  on_exceed: Type.Optional(Type.Union(ON_EXCEED.map((p) => Type.Literal(p)))),
  /** Percentages of `amount` at which an event (reason BudgetAlert) is recorded, once per period each. */
  alerts: Type.Optional(Type.Array(Type.Integer({ minimum: 1, maximum: 1000 }), { maxItems: 20 })),
}, { additionalProperties: false });
export type Budget = Static<typeof Budget>;

/** A project's budget as the API answers it: the settings, where they came from, and this period's standing. */
export const BudgetView = Type.Object({
  project: Type.String(),
  budget: Type.Union([Type.Required(Budget), Type.Null()]),
  source: Type.Union([Type.Literal('config'), Type.Literal('api'), Type.Null()]),
  periodStart: Type.Union([Type.String(), Type.Null()]),
  periodEnd: Type.Union([Type.String(), Type.Null()]),
  spent: Type.Number(),
  /** Dollars per hour of the project's instances now. */
  burnPerHour: Type.Number(),
  /** The queue reason while the budget holds back new instances; null when it does not. */
  holding: Type.Union([Type.String(), Type.Null()]),
});
export type BudgetView = Static<typeof BudgetView>;

export const COST_GROUPS = ['project', 'user', 'fleet', 'run', 'backend'] as const;
/** Rows a cost report shows unless asked for more: the dearest; the rest are summed in `others`. */
export const DEFAULT_COST_ROWS = 100;
export type CostGroup = typeof COST_GROUPS[number];

export const CostRow = Type.Object({
  /** The project, user, fleet, run or backend; `-` for time no run held (charged to its fleet) when grouped by user or run. */
  name: Type.String(),
  seconds: Type.Number({ description: 'instance-seconds (a run using part of an instance counts its share)' }),
  dollars: Type.Number(),
});
export const CostReport = Type.Object({
  project: Type.String(),
  by: Type.Union(COST_GROUPS.map((g) => Type.Literal(g))),
  since: Type.String(),
  until: Type.String(),
  total: Type.Number(),
  /** The dearest rows, as many as asked for (`limit`, default 100; 0 for all). */
  rows: Type.Array(CostRow),
  /** The rows left out, summed. */
  others: Type.Object({ count: Type.Integer({ minimum: 0 }), seconds: Type.Number(), dollars: Type.Number() }),
});
export type CostReport = Static<typeof CostReport>;

/** Every problem of a budget, with the field it is at; none for a valid one. */
export function budgetProblems(value: unknown): { path: string[]; message: string }[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return [{ path: [], message: 'expected an object with amount and period' }];
  const problems: { path: string[]; message: string }[] = [];
  const budget = value as Record<string, unknown>;
  for (const key of Object.keys(budget)) {
    if (!['amount', 'period', 'on_exceed', 'alerts'].includes(key)) problems.push({ path: [key], message: 'unknown field; expected amount, period, on_exceed or alerts' });
  }
  if (typeof budget.amount !== 'number' || !Number.isFinite(budget.amount) || budget.amount < 0) {
    problems.push({ path: ['amount'], message: `expected dollars per period, a number of at least 0, got ${JSON.stringify(budget.amount)}` });
  }
  if (!(BUDGET_PERIODS as readonly unknown[]).includes(budget.period)) {
    problems.push({ path: ['period'], message: `expected one of ${BUDGET_PERIODS.join(', ')}, got ${JSON.stringify(budget.period)}` });
  }
  if (budget.on_exceed !== undefined && !(ON_EXCEED as readonly unknown[]).includes(budget.on_exceed)) {
    problems.push({ path: ['on_exceed'], message: `expected one of ${ON_EXCEED.join(', ')}, got ${JSON.stringify(budget.on_exceed)}` });
  }
  if (budget.alerts !== undefined && (!Array.isArray(budget.alerts) || budget.alerts.length > 20
    || budget.alerts.some((a) => !Number.isInteger(a) || a < 1 || a > 1000))) {
    problems.push({ path: ['alerts'], message: `expected a list of whole percentages from 1 to 1000, such as [50, 80, 100], got ${JSON.stringify(budget.alerts)}` });
  }
  return problems;
}

/** The budget with its defaults filled in: warn, and alerts at 50, 80 and 100 %. */
export function completeBudget(budget: Budget): Required<Budget> {
  return { amount: budget.amount, period: budget.period, on_exceed: budget.on_exceed ?? 'warn', alerts: [...new Set(budget.alerts ?? DEFAULT_ALERTS)].sort((a, b) => a - b) };
}

/** The calendar period (UTC) that holds `at`: a day, a week from Monday, or a month. */
export function budgetPeriod(period: BudgetPeriod, at: Date): { start: Date; end: Date } {
  const y = at.getUTCFullYear();
  const m = at.getUTCMonth();
  const d = at.getUTCDate();
  switch (period) {
    case 'day': return { start: new Date(Date.UTC(y, m, d)), end: new Date(Date.UTC(y, m, d + 1)) };
    case 'week': {
      const monday = d - ((at.getUTCDay() + 6) % 7);
      return { start: new Date(Date.UTC(y, m, monday)), end: new Date(Date.UTC(y, m, monday + 7)) };
    }
    case 'month': return { start: new Date(Date.UTC(y, m, 1)), end: new Date(Date.UTC(y, m + 1, 1)) };
  }
}

const PERIOD_WORDS: Record<BudgetPeriod, string> = { day: 'today', week: 'this week', month: 'this month' };

/** `budget spent: $500.12 of $500 this month (resets 2026-12-01)`, the queue reason of a run the budget holds. */
export function budgetSpentReason(budget: Pick<Budget, 'amount' | 'period'>, spent: number, committed: number, end: Date): string {
  const resets = `resets ${end.toISOString().slice(0, 10)}`;
  if (spent >= budget.amount) return `budget spent: ${formatDollars(spent)} of ${formatDollars(budget.amount)} ${PERIOD_WORDS[budget.period]} (${resets})`;
  return `budget nearly spent: ${formatDollars(spent)} of ${formatDollars(budget.amount)} ${PERIOD_WORDS[budget.period]}, ${formatDollars(committed)} more committed to the next minute of its instances (${resets})`;
}

/** `80% of the $500 month budget spent: $401.20`, the message of a BudgetAlert event. */
export function budgetAlertMessage(budget: Pick<Budget, 'amount' | 'period'>, percent: number, spent: number): string {
  return `${percent}% of the ${formatDollars(budget.amount)} ${budget.period} budget spent: ${formatDollars(spent)}`;
}

/** How long the rest of the budget lasts at `perHour`: `3h 20m`, `never` at no burn, `spent` once spent. */
export function budgetRunway(left: number, perHour: number): string {
  if (left <= 0) return 'spent';
  if (perHour <= 0) return 'for ever at this rate';
  const minutes = Math.floor((left / perHour) * 60);
  if (minutes < 60) return `${minutes}m`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours}h ${minutes % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

/** `--since 7d` (days or hours back from now) or `--month 2026-11`: the window a cost report sums. */
export function costWindow(options: { since?: string; month?: string }, now: Date): { since: Date; until: Date } {
  if (options.since !== undefined && options.month !== undefined) throw new Error('give --since or --month, not both');
  if (options.month !== undefined) {
    const match = /^(\d{4})-(\d{2})$/.exec(options.month);
    const month = match ? Number(match[2]) : 0;
    if (!match || month < 1 || month > 12) throw new Error(`month: expected YYYY-MM, such as 2026-11, got ${JSON.stringify(options.month)}`);
    return { since: new Date(Date.UTC(Number(match[1]), month - 1, 1)), until: new Date(Date.UTC(Number(match[1]), month, 1)) };
  }
  const since = options.since ?? '30d';
  const match = /^(\d{1,4})([hdw])$/.exec(since);
  if (!match) throw new Error(`since: expected a number of hours, days or weeks, such as 24h, 7d or 2w, got ${JSON.stringify(since)}`);
  const hours = Number(match[1]) * { h: 1, d: 24, w: 168 }[match[2] as 'h' | 'd' | 'w'];
  return { since: new Date(now.getTime() - hours * 3_600_000), until: now };
}
