import type { CAC } from 'cac';
import { COST_GROUPS, costWindow, DEFAULT_COST_ROWS, type CostReport } from '../../api/costs.js';
import { formatDollars } from '../../api/offer.js';
import { optionText } from '../args.js';
import { connectOnServer } from '../connect.js';
import { action, CliError } from '../errors.js';
import { printJson } from '../format.js';
import { renderTable } from '../table.js';

interface CostFlags {
  json?: boolean;
}

/** Instance-hours as a person reads them: `42s`, `12m`, `3.5h`. */
function formatSeconds(seconds: number): string {
  if (seconds < 60) return `${Math.round(seconds)}s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m`;
  return `${(seconds / 3600).toFixed(1)}h`;
}

export function registerCost(cli: CAC): void {
  cli.command('cost', 'What the project has cost, from the ledger: by run (default), project, user, fleet or backend')
    .option('--since <age>', 'From this long ago until now: 24h, 7d, 2w (default 30d)')
    .option('--month <YYYY-MM>', 'One calendar month (UTC), such as 2026-11')
    .option('--by <group>', `Group by ${COST_GROUPS.join(', ')}`)
    .option('--limit <rows>', `The dearest rows to show (default ${DEFAULT_COST_ROWS}; 0 for all); the rest are summed in one line`)
    .option('--json', 'Print JSON: total dollars, the rows, and the others summed')
    .option('--project <name>', 'Project to use (default: the default project; an admin may name any)')
    .example('orchestrator cost --since 7d --by user')
    .example('orchestrator cost --month 2026-11 --by fleet --json')
    .action(action(async (flags: CostFlags) => {
      const since = optionText(['since']);
      const month = optionText(['month']);
      const by = optionText(['by']) ?? 'run';
      if (!(COST_GROUPS as readonly string[]).includes(by)) throw new CliError(`--by: expected one of ${COST_GROUPS.join(', ')}, got "${by}"`);
      try {
        costWindow({ since, month }, new Date());
      } catch (error) {
        throw new CliError(`--${(error as Error).message}`);
      }
      const client = connectOnServer();
      const limit = optionText(['limit']);
      const query = new URLSearchParams({ by, ...(since === undefined ? {} : { since }), ...(month === undefined ? {} : { month }), ...(limit === undefined ? {} : { limit }) });
      const report = await client.get<CostReport>(client.projectPath(`/costs?${query}`));
      if (flags.json === true) {
        printJson(report);
        return;
      }
      const window = `${report.since.slice(0, 16).replace('T', ' ')} to ${report.until.slice(0, 16).replace('T', ' ')} UTC`;
      if (report.rows.length === 0) {
        process.stdout.write(`project ${report.project} has cost nothing from ${window}\n`);
        return;
      }
      const others = report.others.count > 0 ? [[`(${report.others.count} more)`, formatSeconds(report.others.seconds), formatDollars(report.others.dollars)]] : [];
      process.stdout.write(renderTable([by, 'instance time', 'cost'], [...report.rows.map((row) => [row.name, formatSeconds(row.seconds), formatDollars(row.dollars)]), ...others]));
      process.stdout.write(`total ${formatDollars(report.total)} for project ${report.project} from ${window}${by === 'run' || by === 'user' ? ' (- is time no run held, charged to its fleet)' : ''}\n`);
    }));
}
