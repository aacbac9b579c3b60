import type { CAC } from 'cac';
import { parseDuration } from '../../api/duration.js';
import type { Run } from '../../api/objects.js';
import type { ServiceStats } from '../../api/services.js';
import { optionText } from '../args.js';
import type { ApiClient } from '../client.js';
import { connect } from '../connect.js';
import { action, CliError } from '../errors.js';
import { printJson } from '../format.js';
import { renderTable } from '../table.js';

interface ServiceFlags {
  json?: boolean;
}

/** The server keeps an hour of statistics; it answers windows from 10 s to that hour. */
const WINDOW_RANGE_SECONDS = { min: 10, max: 3600 };
const DEFAULT_WINDOW = '5m';

export function serviceStatsPath(client: ApiClient, run: string, windowSeconds: number): string {
  return client.projectPath(`/services/${encodeURIComponent(run)}/stats?window=${windowSeconds}`);
}

/** `12`, `0.4`, `0.03`: two decimals at most. */
export function formatRate(perSecond: number): string {
  return String(Number(perSecond.toFixed(2)));
}

/** `20ms`, `1.5s`; `-` without requests. */
function formatLatency(ms: number | null): string {
  if (ms === null) return '-';
  return ms < 1000 ? `${ms}ms` : `${Number((ms / 1000).toFixed(1))}s`;
}

/** `5m`, `1h`, `90s`. */
function formatWindow(seconds: number): string {
  if (seconds % 3600 === 0) return `${seconds / 3600}h`;
  if (seconds % 60 === 0) return `${seconds / 60}m`;
  return `${seconds}s`;
}

function windowSeconds(text: string): number {
  let seconds: number;
  try {
    seconds = parseDuration(text);
  } catch (error) {
    throw new CliError(`--window: ${(error as Error).message}`);
  }
  if (seconds < WINDOW_RANGE_SECONDS.min || seconds > WINDOW_RANGE_SECONDS.max) {
    throw new CliError(`--window: expected from 10s to 1h (the server keeps an hour of statistics), got ${text}`);
  }
  return seconds;
}

export function renderServiceStats(stats: ServiceStats): string {
  return renderTable(['run', 'window', 'requests', 'req/s', 'p50', 'p99', 'errors', 'in flight (peak)', 'replicas'], [[
    stats.run,
    formatWindow(stats.windowSeconds),
    String(stats.requests),
    formatRate(stats.requestsPerSecond),
    formatLatency(stats.p50Ms),
    formatLatency(stats.p99Ms),
    `${Number((stats.errorRate * 100).toFixed(1))}% (${stats.errors})`,
    `${stats.inflightNow} (${stats.inflight})`,
    `${stats.readyReplicas}/${stats.desiredReplicas} ready`,
  ]]);
}

async function showStats(run: string | undefined, flags: ServiceFlags): Promise<void> {
  if (!run) throw new CliError('give the service: orchestrator service stats RUN');
  const client = connect();
  const stats = await client.get<ServiceStats>(serviceStatsPath(client, String(run), windowSeconds(optionText(['window']) ?? DEFAULT_WINDOW)));
  if (flags.json === true) printJson(stats);
  else process.stdout.write(renderServiceStats(stats));
}

/** Puts back the last generation that was ready, whose replicas serve on. */
async function rollBack(run: string | undefined, flags: ServiceFlags): Promise<void> {
  if (!run) throw new CliError('give the service: orchestrator service rollback RUN');
  const client = connect();
  const view = await client.post<Run>(client.projectPath(`/services/${encodeURIComponent(String(run))}/rollback`), {});
  if (flags.json === true) printJson(view);
  else process.stdout.write(`${view.name}: back to generation ${view.generation}\n`);
}

const ACTIONS = 'service stats RUN, service rollback RUN';

export function registerService(cli: CAC): void {
  cli.command('service [action] [run]', 'Requests a service has served: service stats RUN; put back the last generation that was ready: service rollback RUN')
    .option('--window <duration>', 'stats: over the last 5m (10s to 1h)')
    .option('--json', 'Print JSON')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator service stats echo-llm --window 1m')
    .example('orchestrator service rollback echo-llm')
    .action(action(async (verb: string | undefined, run: string | undefined, flags: ServiceFlags) => {
      if (verb === 'stats') return showStats(run, flags);
      if (verb === 'rollback') return rollBack(run, flags);
      throw new CliError(verb === undefined ? `give an action: orchestrator ${ACTIONS}` : `unknown service action "${verb}"; use ${ACTIONS}`);
    }));
}
