import type { CAC } from 'cac';
import type { LogLine } from '../../api/objects.js';
import { connect, projectFlag } from '../connect.js';
import { action } from '../errors.js';
import { followRun, runPath, writeLogLine } from '../follow.js';

interface LogsFlags {
  follow?: boolean;
}

export function registerLogs(cli: CAC): void {
  cli.command('logs <run>', 'Print a run\'s logs: stdout lines to stdout, stderr lines to stderr')
    .option('-f, --follow', 'Keep printing new lines until the run finishes')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator logs -f hello')
    .action(action(async (name: string, flags: LogsFlags) => {
      const client = connect();
      const run = String(name);
      if (flags.follow === true) {
        const outcome = await followRun(client, run, null);
        if (outcome.kind === 'interrupted') {
          process.stderr.write(`stopped following ${run}; it keeps running (orchestrator stop ${run}${projectFlag()} stops it)\n`);
          return 130;
        }
        return 0;
      }
      let after = 0;
      for (;;) {
        const page = await client.get<{ lines: LogLine[]; next: number }>(runPath(client, run, `/logs?after=${after}`));
        for (const line of page.lines) writeLogLine(line);
        if (page.lines.length === 0 || page.next <= after) return 0;
        after = page.next;
      }
    }));
}
