import type { CAC } from 'cac';
import type { Fleet } from '../../api/objects.js';
import { connect } from '../connect.js';
import { action, CliError } from '../errors.js';
import { renderFleets } from '../fleet-table.js';
import { printJson } from '../format.js';
import { confirm, ensureCanConfirm } from '../prompt.js';
import { outputWidth, WIDE_OPTION } from '../table.js';

interface FleetFlags {
  all?: boolean;
  json?: boolean;
  yes?: boolean;
  wide?: boolean;
}

export function registerFleet(cli: CAC): void {
  cli.command('fleet [action] [name]', 'List fleets with their instances (fleet, fleet list) or delete one (fleet delete NAME)')
    .option('-a, --all', 'list: include ended fleets, with their ids and creation times')
    .option('--json', 'list: print JSON')
    .option('-y, --yes', 'delete: do not ask for confirmation')
    .option(...WIDE_OPTION)
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator fleet')
    .example('orchestrator fleet delete gpucloud -y')
    .action(action(async (verb: string | undefined, name: string | undefined, flags: FleetFlags) => {
      if (verb === undefined || verb === 'list') return listFleets(flags);
      if (verb === 'delete') return deleteFleet(name, flags);
      throw new CliError(`unknown fleet action "${verb}"; use fleet list or fleet delete NAME`);
    }));
}

async function listFleets(flags: FleetFlags): Promise<void> {
  const client = connect();
  const fleets = await client.get<Fleet[]>(client.projectPath(`/fleets${flags.all ? '?all=true' : ''}`));
  if (flags.json === true) {
    printJson(fleets);
    return;
  }
  if (fleets.length === 0) {
    process.stdout.write('no fleets; create one with orchestrator apply -f FLEET.yml\n');
    return;
  }
  process.stdout.write(renderFleets(fleets, flags.all === true, outputWidth(process.stdout, flags.wide === true)));
}

async function deleteFleet(name: string | undefined, flags: FleetFlags): Promise<void> {
  if (!name) throw new CliError('give the fleet: orchestrator fleet delete NAME');
  const yes = flags.yes === true;
  ensureCanConfirm(yes, 'delete the fleet');
  const client = connect();
  const path = client.projectPath(`/fleets/${encodeURIComponent(String(name))}`);
  const fleet = await client.get<Fleet>(path);
  const live = fleet.instances.filter((i) => i.status !== 'terminated').length;
  const question = live === 0 ? `Delete fleet ${fleet.name}? It has no instances.` : `Delete fleet ${fleet.name} and terminate its ${live} ${live === 1 ? 'instance' : 'instances'}?`;
  if (!(await confirm(question, yes))) {
    process.stderr.write(`fleet ${fleet.name} kept\n`);
    return;
  }
  await client.delete<Fleet>(path);
  process.stdout.write(live === 0 ? `fleet ${fleet.name} is being deleted\n` : `fleet ${fleet.name} is being deleted; its instances are terminated once their runs end\n`);
}
