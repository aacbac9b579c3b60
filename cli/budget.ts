import { BUDGET_PERIODS, budgetRunway, type Budget, type BudgetView } from '../api/costs.js';
import { formatDollars } from '../api/offer.js';
import { optionText } from './args.js';
import { connectOnServer } from './connect.js';
import { CliError } from './errors.js';
import { printJson } from './format.js';

/** `orchestrator project budget [set|remove]`: shows the project's budget and this period's spend, or changes it (admins). */
export async function budgetAction(verb: string | undefined, flags: { json?: boolean }): Promise<void> {
  const client = connectOnServer();
  const path = client.projectPath('/budget');
  switch (verb ?? 'show') {
    case 'show': {
      const view = await client.get<BudgetView>(path);
      if (flags.json === true) printJson(view);
      else process.stdout.write(budgetText(view));
      return;
    }
    case 'set': {
      const view = await client.request<BudgetView>('PUT', path, budgetFromFlags());
      process.stderr.write(`budget of project ${view.project} set; config.yml's budget for it, if any, replaces this at the server's next start\n`);
      process.stdout.write(budgetText(view));
      return;
    }
    case 'remove':
      await client.delete(path);
      process.stderr.write(`project ${client.project} has no budget now\n`);
      return;
    default: throw new CliError(`unknown budget action "${verb}"; use set or remove, or nothing to show it`);
  }
}

/** The budget the flags give; the server checks the values and says what is wrong. */
function budgetFromFlags(): Record<string, unknown> {
  const amount = optionText(['amount']);
  const period = optionText(['period']);
  if (amount === undefined || period === undefined) throw new CliError(`budget set needs --amount DOLLARS and --period ${BUDGET_PERIODS.join('|')}`);
  const onExceed = optionText(['on-exceed']);
  const alerts = optionText(['alerts']);
  return {
    amount: Number(amount.replace(/^\$/, '')), period,
    ...(onExceed === undefined ? {} : { on_exceed: onExceed }),
    ...(alerts === undefined ? {} : { alerts: alerts.split(',').map((a) => Number(a.trim().replace(/%$/, ''))) }),
  };
}

function budgetText(view: BudgetView): string {
  if (!view.budget) return `project ${view.project} has no budget; set one with orchestrator project budget set --amount DOLLARS --period month\n`;
  const b: Required<Budget> = view.budget;
  const left = b.amount - view.spent;
  return [
    `project ${view.project}: ${formatDollars(b.amount)} per ${b.period} (from ${view.source === 'config' ? 'config.yml' : 'the API'}), on_exceed ${b.on_exceed}, alerts at ${b.alerts.join(', ')}%`,
    `spent ${formatDollars(view.spent)} since ${view.periodStart!.slice(0, 10)}; resets ${view.periodEnd!.slice(0, 10)}`,
    `burning ${formatDollars(view.burnPerHour)}/h: the rest lasts ${budgetRunway(left, view.burnPerHour)}`,
    ...(view.holding ? [`new instances are held: ${view.holding}`] : []),
  ].join('\n') + '\n';
}
