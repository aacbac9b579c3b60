import { setTimeout as sleep } from 'node:timers/promises';
import type { CAC } from 'cac';
import type { Run } from '../../api/objects.js';
import { connect, projectFlag } from '../connect.js';
import { action } from '../errors.js';
import { isFinished, runPath } from '../follow.js';

interface StopFlags {
  abort?: boolean;
}

const WAIT_MS = 15_000;
const POLL_MS = 200;

export function registerStop(cli: CAC): void {
  cli.command('stop <run>', 'Stop a run and wait briefly for it to end; its logs are kept')
    .option('--abort', 'Stop at once, without letting the commands shut down cleanly')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator stop hello')
    .action(action(async (name: string, flags: StopFlags) => {
      const client = connect();
      const path = runPath(client, String(name));
      let run = await client.post<Run>(`${path}/stop`, { abort: flags.abort === true });
      const deadline = Date.now() + WAIT_MS;
      while (!isFinished(run) && Date.now() < deadline) {
        await sleep(POLL_MS);
        run = await client.get<Run>(path);
      }
      if (isFinished(run)) {
        const why = run.terminationReason ? ` (${run.terminationReason})` : run.statusMessage ? `: ${run.statusMessage}` : '';
        process.stdout.write(`${run.name}: ${run.status}${why}\n`);
      } else {
        process.stdout.write(`${run.name}: ${run.status}${run.statusMessage ? `: ${run.statusMessage}` : ''}; orchestrator ps${projectFlag()} shows when it has ended\n`);
      }
    }));
}
