import type { CAC } from 'cac';
import type { Run } from '../../api/objects.js';
import { connect } from '../connect.js';
import { action } from '../errors.js';
import { formatAge, formatGpuInfo, formatPrice, printJson } from '../format.js';
import { renderTable } from '../table.js';

interface PsFlags {
  all?: boolean;
  json?: boolean;
}

/** `submitted (#2)` while queued, so the user sees where the run stands. */
export function runStatusText(run: Run): string {
  if (run.status === 'submitted' && run.queuePosition !== null) return `${run.status} (#${run.queuePosition})`;
  if (run.status === 'failed' && run.exitCode !== null && run.exitCode !== 0) return `${run.status} (${run.exitCode})`;
  return run.status;
}

export function registerPs(cli: CAC): void {
  cli.command('ps', 'List runs: active ones, or all with -a')
    .option('-a, --all', 'Include finished runs')
    .option('--json', 'Print JSON')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator ps -a')
    .action(action(async (flags: PsFlags) => {
      const client = connect();
      const runs = await client.get<Run[]>(client.projectPath(`/runs${flags.all ? '?all=true' : ''}`));
      if (flags.json === true) {
        printJson(runs);
        return;
      }
      if (runs.length === 0) {
        process.stdout.write(flags.all ? 'no runs\n' : 'no active runs; orchestrator ps -a shows finished ones too\n');
        return;
      }
      const now = Date.now();
      process.stdout.write(renderTable(
        ['name', 'kind', 'status', 'gpu', '$/h', 'submitted', 'message'],
        runs.map((run) => [run.name, run.kind, runStatusText(run), formatGpuInfo(run.gpu), formatPrice(run.pricePerHour), formatAge(run.submittedAt, now), run.statusMessage]),
      ));
    }));
}
