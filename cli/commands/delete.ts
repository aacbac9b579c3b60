import type { CAC } from 'cac';
import { connect } from '../connect.js';
import { action } from '../errors.js';
import { runPath } from '../follow.js';

export function registerDelete(cli: CAC): void {
  cli.command('delete <run>', 'Delete a finished run with its logs')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator delete hello')
    .action(action(async (name: string) => {
      const client = connect();
      await client.delete(runPath(client, String(name)));
      process.stdout.write(`run ${name} deleted\n`);
    }));
}
