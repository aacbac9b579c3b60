import type { CAC } from 'cac';
import { formatUtc } from '../../api/cron.js';
import type { LogLine, Run } from '../../api/objects.js';
import type { ApiClient } from '../client.js';
import { connect, projectFlag } from '../connect.js';
import { action, CliError } from '../errors.js';
import { droppedLinesNote, exitCodeOf, followRun, jobPickQuery, LogCursors, runPath } from '../follow.js';
import { LogOutput } from '../log-output.js';
import { writeOutputInOrder } from '../output-order.js';
import { statusLine } from '../progress.js';

interface LogsFlags {
  follow?: boolean;
  replica?: string | number;
  node?: string | number;
  attempt?: string | number;
}

export function registerLogs(cli: CAC): void {
  cli.command('logs <run>', 'Print a run\'s logs as they are now: stdout lines to stdout, stderr lines to stderr')
    .option('-f, --follow', 'Keep printing new lines until the run finishes; then print its final status and exit with its code, as apply does')
    .option('--replica <n>', 'For a service: which replica (default: the lowest-numbered running one)')
    .option('--node <rank>', 'For a multi-node task: only this node\'s lines (default: every node\'s, each after [rank N])')
    .option('--attempt <n>', 'For a run resubmitted under its retry: that attempt\'s lines (default: the latest attempt)')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator logs -f hello')
    .example('orchestrator logs echo-llm --replica 1')
    .example('orchestrator logs train --node 1')
    .example('orchestrator logs flaky --attempt 1')
    .action(action(async (name: string, flags: LogsFlags) => {
      writeOutputInOrder();
      const client = connect();
      const run = String(name);
      const pick = {
        replica: replicaFlag(flags.replica),
        node: wholeNumberFlag('--node', 'a node rank', flags.node),
        attempt: wholeNumberFlag('--attempt', 'an attempt number', flags.attempt),
      };
      if (flags.follow === true) {
        const followed = await latestRunOfSchedule(client, run);
        const outcome = await followRun(client, followed, null, pick);
        if (outcome.kind === 'interrupted') {
          process.stderr.write(`stopped following ${followed}; it keeps running (orchestrator stop ${followed}${projectFlag()} stops it)\n`);
          return 130;
        }
        const { run: ended } = outcome;
        process.stderr.write(`${statusLine(ended.status, ended.statusMessage)}\n`);
        return exitCodeOf(ended);
      }
      const output = new LogOutput();
      const printed = new LogCursors();
      for await (const line of client.stream<LogLine>(runPath(client, run, `/logs?format=jsonl${jobPickQuery(pick)}`), new AbortController().signal)) {
        const gap = printed.gapBefore(line);
        if (gap > 0) output.note(droppedLinesNote(gap));
        output.write(line);
        printed.advance(line);
      }
      output.flush();
      return 0;
    }));
}

/** The run `logs -f` follows: the run named, or for a schedule the run it submitted last. */
async function latestRunOfSchedule(client: ApiClient, name: string): Promise<string> {
  const { schedule, kind } = await client.get<Run>(runPath(client, name));
  if (!schedule) return name;
  if (schedule.lastRun === null) throw new CliError(`scheduled ${kind} ${name} has submitted no run yet${schedule.nextRunAt ? `; its first is due at ${formatUtc(new Date(schedule.nextRunAt))}` : ''}`);
  process.stderr.write(`following ${schedule.lastRun}, the latest run of scheduled ${kind} ${name}\n`);
  return schedule.lastRun;
}

export function replicaFlag(value: string | number | undefined): number | undefined {
  return wholeNumberFlag('--replica', 'a replica number', value);
}

export function wholeNumberFlag(flag: string, what: string, value: string | number | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d{1,6}$/.test(String(value))) throw new CliError(`${flag}: expected ${what} such as 0, got ${value}`);
  return Number(value);
}
