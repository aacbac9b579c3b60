import type { CAC } from 'cac';
import type { AgentMetrics } from '../../api/agent.js';
import { connect } from '../connect.js';
import { action } from '../errors.js';
import { runPath } from '../follow.js';
import { formatSize, printJson } from '../format.js';
import { renderTable } from '../table.js';

interface MetricsFlags {
  json?: boolean;
}

function percent(value: number): string {
  return `${Math.round(value)}%`;
}

export function registerMetrics(cli: CAC): void {
  cli.command('metrics <run>', 'Show CPU, memory and GPU use of a running run')
    .option('--json', 'Print JSON')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator metrics hello')
    .action(action(async (name: string, flags: MetricsFlags) => {
      const client = connect();
      const metrics = await client.get<AgentMetrics>(runPath(client, String(name), '/metrics'));
      if (flags.json === true) {
        printJson(metrics);
        return;
      }
      process.stdout.write(renderTable(['cpu', 'memory'], [[
        percent(metrics.cpuPercent),
        `${formatSize(metrics.memoryUsedMib)} / ${formatSize(metrics.memoryTotalMib)}`,
      ]]));
      if (metrics.gpus.length === 0) {
        process.stdout.write('no GPUs\n');
        return;
      }
      process.stdout.write(`\n${renderTable(['gpu', 'name', 'utilization', 'memory'], metrics.gpus.map((gpu) => [
        String(gpu.index), gpu.name, percent(gpu.utilizationPercent), `${formatSize(gpu.memoryUsedMib)} / ${formatSize(gpu.memoryTotalMib)}`,
      ]))}`);
    }));
}
