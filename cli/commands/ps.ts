import type { CAC } from 'cac';
import { RUN_LIST_LIMIT, type Run, type RunNode } from '../../api/objects.js';
import type { Replica, ServiceStats } from '../../api/services.js';
import { ApiRequestError, type ApiClient } from '../client.js';
import { connect } from '../connect.js';
import { action } from '../errors.js';
import { isFinished } from '../follow.js';
import { formatAge, formatCost, formatGpuInfo, formatPrice, formatTimeLeft, printJson } from '../format.js';
import { refreshSshConfig, sshConfigWarning } from '../ssh-config.js';
import { outputWidth, renderTable, WIDE_OPTION } from '../table.js';
import { formatRate } from './service.js';

interface PsFlags {
  all?: boolean;
  json?: boolean;
  wide?: boolean;
}

/** `ps` shows the rate of the last minute: what a service does now. */
const PS_STATS_WINDOW_SECONDS = 60;

/**
 * `submitted (#2)` while queued, so the user sees where the run stands; a service says how many replicas serve of how many
 * wanted; a dev environment nobody is connected to, when inactivity_duration stops it; a schedule, when it submits its next run.
 */
export function runStatusText(run: Run, stats?: ServiceStats | null): string {
  if (run.service && !isFinished(run)) {
    const ready = run.service.replicas.filter((replica) => replica.state === 'ready').length;
    const rate = stats ? `, ${formatRate(stats.requestsPerSecond)} req/s` : '';
    return `${run.status} (${ready}/${run.service.desiredReplicas} ready${rate})`;
  }
  if (run.status === 'submitted' && run.queuePosition !== null) return `${run.status} (#${run.queuePosition})`;
  if (run.status === 'pending' && run.schedule?.nextRunAt) return `${run.status} (next run in ${formatTimeLeft(run.schedule.nextRunAt)})`;
  if (run.status === 'running' && run.inactivityStopAt) return `${run.status} (idle, stops in ${formatTimeLeft(run.inactivityStopAt)})`;
  if (run.status === 'failed' && run.exitCode !== null && run.exitCode !== 0) return `${run.status} (${run.exitCode})${attemptText(run)}`;
  return `${run.status}${attemptText(run)}`;
}

/** ` (attempt 2)` once the run has been resubmitted under its retry policy; nothing for a first attempt. */
function attemptText(run: Run): string {
  return run.attempt > 1 ? ` (attempt ${run.attempt})` : '';
}

/** A replica's row, under its service: its group, its state (and generation while an update replaces it), and the instance it runs on. */
function replicaRow(run: Run, replica: Replica, now: number): string[] {
  const name = `  replica ${replica.replica}${replica.group === null ? '' : ` (group ${replica.group})`}`;
  const state = replica.generation === run.generation ? replica.state : `${replica.state} (gen ${replica.generation})`;
  const message = replica.instance && !replica.statusMessage.includes(replica.instance)
    ? [`on ${replica.instance}`, replica.statusMessage].filter(Boolean).join(': ') : replica.statusMessage;
  return [name, '', state, '-', '-', '', replica.startedAt ? formatAge(replica.startedAt, now) : '-', message];
}

/** A node's row, under its multi-node task: its job's status (with its exit code when it failed) and the instance it runs on. */
function nodeRow(node: RunNode, now: number): string[] {
  const status = node.status === 'failed' && node.exitCode !== null && node.exitCode !== 0 ? `${node.status} (${node.exitCode})` : node.status;
  const message = node.instance && !node.statusMessage.includes(node.instance)
    ? [`on ${node.instance}`, node.statusMessage].filter(Boolean).join(': ') : node.statusMessage;
  return [`  node ${node.rank}`, '', status, formatGpuInfo(node.gpu), formatPrice(node.pricePerHour), '', node.startedAt ? formatAge(node.startedAt, now) : '-', message];
}

/** The rows of `ps`: one per run, and below a service one per replica, below a multi-node task one per node. `stats` holds the services' recent requests where known. */
export function psRows(runs: readonly Run[], stats: ReadonlyMap<string, ServiceStats>, now = Date.now()): string[][] {
  return runs.flatMap((run) => [
    [run.name, run.kind, runStatusText(run, stats.get(run.name)), `${run.nodes?.length && run.gpu?.count ? `${run.nodes.length}×` : ''}${formatGpuInfo(run.gpu)}`,
      formatPrice(run.pricePerHour), formatCost(run.cost), formatAge(run.submittedAt, now), run.statusMessage],
    ...(run.service?.replicas ?? []).map((replica) => replicaRow(run, replica, now)),
    ...(run.nodes ?? []).map((node) => nodeRow(node, now)),
  ]);
}

/** Each live service's requests over the last minute, in one call; a server without the route leaves them out. */
async function liveServiceStats(client: ApiClient, runs: readonly Run[]): Promise<Map<string, ServiceStats>> {
  if (!runs.some((run) => run.service && !isFinished(run))) return new Map();
  const stats = await client.get<ServiceStats[]>(client.projectPath(`/services/stats?window=${PS_STATS_WINDOW_SECONDS}`))
    .catch((error: unknown) => {
      if (error instanceof ApiRequestError) return [];
      throw error;
    });
  return new Map(stats.map((service) => [service.run, service]));
}

export function registerPs(cli: CAC): void {
  cli.command('ps', 'List runs: active ones, or all with -a; a service with its replicas, a multi-node task with its nodes')
    .option('-a, --all', 'Include finished runs')
    .option('--json', 'Print JSON')
    .option(...WIDE_OPTION)
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator ps -a')
    .action(action(async (flags: PsFlags) => {
      const client = connect();
      const runs = await client.get<Run[]>(client.projectPath(`/runs${flags.all ? '?all=true' : ''}`));
      try {
        refreshSshConfig(client.project, runs);
      } catch (error) {
        sshConfigWarning(error);
      }
      if (flags.json === true) {
        printJson(runs);
        return;
      }
      if (runs.length === 0) {
        process.stdout.write(flags.all ? 'no runs\n' : 'no active runs; orchestrator ps -a shows finished ones too\n');
        return;
      }
      process.stdout.write(renderTable(['name', 'kind', 'status', 'gpu', '$/h', 'cost', 'submitted', 'message'], psRows(runs, await liveServiceStats(client, runs)), outputWidth(process.stdout, flags.wide === true)));
      if (runs.length >= RUN_LIST_LIMIT) {
        process.stderr.write(`the newest ${RUN_LIST_LIMIT} ${flags.all ? 'runs' : 'active runs'} are shown, the most the server lists at once; older ones are not\n`);
      }
    }));
}
