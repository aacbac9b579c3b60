import type { CAC } from 'cac';
import type { AgentMetrics } from '../../api/agent.js';
import type { Run } from '../../api/objects.js';
import type { ApiClient } from '../client.js';
import { connect } from '../connect.js';
import { action, CliError } from '../errors.js';
import { jobPickQuery, runPath, type JobPick } from '../follow.js';
import { formatSize, printJson } from '../format.js';
import { renderTable } from '../table.js';
import { replicaFlag, wholeNumberFlag } from './logs.js';

interface MetricsFlags {
  json?: boolean;
  replica?: string | number;
  node?: string | number;
}

/** One job measured: a replica of a service, a node of a multi-node task, or the run itself (no pick). */
interface Measured {
  pick: JobPick;
  heading: string;
}

function percent(value: number): string {
  return `${Math.round(value)}%`;
}

function renderMetrics(metrics: AgentMetrics): string {
  const machine = renderTable(['cpu', 'memory'], [[
    percent(metrics.cpuPercent),
    `${formatSize(metrics.memoryUsedMib)} / ${formatSize(metrics.memoryTotalMib)}`,
  ]]);
  if (metrics.gpus.length === 0) return `${machine}no GPUs\n`;
  return `${machine}\n${renderTable(['gpu', 'name', 'utilization', 'memory'], metrics.gpus.map((gpu) => [
    String(gpu.index), gpu.name, percent(gpu.utilizationPercent), `${formatSize(gpu.memoryUsedMib)} / ${formatSize(gpu.memoryTotalMib)}`,
  ]))}`;
}

/** A service's running replicas, a multi-node task's running nodes; none when the run is one job. */
function runningParts(run: Run): Measured[] | null {
  if (run.service) {
    return run.service.replicas.filter((replica) => ['starting', 'ready', 'draining'].includes(replica.state))
      .map((replica) => ({ pick: { replica: replica.replica }, heading: `replica ${replica.replica} (${replica.state}${replica.instance ? `, on ${replica.instance}` : ''})` }));
  }
  if (run.nodes) {
    return run.nodes.filter((node) => node.status === 'running')
      .map((node) => ({ pick: { node: node.rank }, heading: `node ${node.rank}${node.instance ? ` (on ${node.instance})` : ''}` }));
  }
  return null;
}

async function metricsOf(client: ApiClient, name: string, pick: JobPick): Promise<AgentMetrics> {
  return client.get<AgentMetrics>(runPath(client, name, `/metrics?${jobPickQuery(pick).slice(1)}`));
}

/** Each running replica's (or node's) metrics under its heading; with --json, a list of `{replica|node, metrics}`. */
async function showParts(client: ApiClient, run: Run, parts: Measured[], json: boolean): Promise<void> {
  const kind = run.service ? 'replica' : 'node';
  if (parts.length === 0) throw new CliError(`${run.service ? 'service' : 'task'} ${run.name} has no running ${kind}; metrics exist only while one runs`);
  const measured = await Promise.all(parts.map(async (part) => ({ part, metrics: await metricsOf(client, run.name, part.pick).catch((error: Error) => error) })));
  if (json) {
    printJson(measured.map(({ part, metrics }) => ({ ...part.pick, ...(metrics instanceof Error ? { error: metrics.message } : { metrics }) })));
    return;
  }
  process.stdout.write(measured.map(({ part, metrics }) => `${part.heading}\n${metrics instanceof Error ? `error: ${metrics.message}\n` : renderMetrics(metrics)}`).join('\n'));
}

export function registerMetrics(cli: CAC): void {
  cli.command('metrics <run>', 'Show CPU, memory and GPU use of a running run (of each running replica of a service)')
    .option('--replica <n>', 'For a service: only this replica (default: every running one)')
    .option('--node <rank>', 'For a multi-node task: only this node (default: every running one)')
    .option('--json', 'Print JSON')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator metrics hello')
    .example('orchestrator metrics echo-llm --replica 1')
    .action(action(async (name: string, flags: MetricsFlags) => {
      const client = connect();
      const pick: JobPick = { replica: replicaFlag(flags.replica), node: wholeNumberFlag('--node', 'a node rank', flags.node) };
      if (pick.replica === undefined && pick.node === undefined) {
        const run = await client.get<Run>(runPath(client, String(name)));
        const parts = runningParts(run);
        if (parts) {
          await showParts(client, run, parts, flags.json === true);
          return;
        }
      }
      const metrics = await metricsOf(client, String(name), pick);
      if (flags.json === true) printJson(metrics);
      else process.stdout.write(renderMetrics(metrics));
    }));
}
