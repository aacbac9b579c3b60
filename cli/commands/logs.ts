import type { CAC } from 'cac';
import type { LogLine } from '../../api/objects.js';
import { connect, projectFlag } from '../connect.js';
import { action } from '../errors.js';
import { droppedLinesNote, followRun, runPath } from '../follow.js';
import { LogOutput } from '../log-output.js';

interface LogsFlags {
  follow?: boolean;
}

export function registerLogs(cli: CAC): void {
  cli.command('logs <run>', 'Print a run\'s logs as they are now: stdout lines to stdout, stderr lines to stderr')
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
      const output = new LogOutput();
      let expected = 1;
      for await (const line of client.stream<LogLine>(runPath(client, run, '/logs?format=jsonl'), new AbortController().signal)) {
        if (line.seq > expected) output.note(droppedLinesNote(line.seq - expected));
        output.write(line);
        expected = line.seq + 1;
      }
      output.flush();
      return 0;
    }));
}
