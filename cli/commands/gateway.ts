import type { CAC } from 'cac';
import type { Gateway } from '../../api/gateways.js';
import { connect } from '../connect.js';
import { action, CliError } from '../errors.js';
import { printJson } from '../format.js';
import { renderGateways } from '../gateway-table.js';
import { confirm, ensureCanConfirm } from '../prompt.js';

interface GatewayFlags {
  json?: boolean;
  yes?: boolean;
}

export function registerGateway(cli: CAC): void {
  cli.command('gateway [action] [name]', 'List gateways with their addresses and certificates (gateway, gateway list) or delete one (gateway delete NAME)')
    .option('--json', 'list: print JSON')
    .option('-y, --yes', 'delete: do not ask for confirmation')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator gateway list')
    .example('orchestrator gateway delete main -y')
    .action(action(async (verb: string | undefined, name: string | undefined, flags: GatewayFlags) => {
      if (verb === undefined || verb === 'list') return listGateways(flags);
      if (verb === 'delete') return deleteGateway(name, flags);
      throw new CliError(`unknown gateway action "${verb}"; use gateway list or gateway delete NAME`);
    }));
}

async function listGateways(flags: GatewayFlags): Promise<void> {
  const client = connect();
  const gateways = await client.get<Gateway[]>(client.projectPath('/gateways'));
  if (flags.json === true) {
    printJson(gateways);
    return;
  }
  if (gateways.length === 0) {
    process.stdout.write('no gateways; create one with orchestrator apply -f GATEWAY.yml\n');
    return;
  }
  process.stdout.write(renderGateways(gateways));
}

async function deleteGateway(name: string | undefined, flags: GatewayFlags): Promise<void> {
  if (!name) throw new CliError('give the gateway: orchestrator gateway delete NAME');
  const yes = flags.yes === true;
  ensureCanConfirm(yes, 'delete the gateway');
  const client = connect();
  const path = client.projectPath(`/gateways/${encodeURIComponent(String(name))}`);
  const gateway = await client.get<Gateway>(path);
  if (!(await confirm(`Delete gateway ${gateway.name}? Its services stay reachable through the server's proxy only`, yes))) {
    process.stderr.write(`gateway ${gateway.name} kept\n`);
    return;
  }
  await client.delete<Gateway>(path);
  process.stdout.write(`gateway ${gateway.name} is being deleted; its process stops and ${gateway.domain} is served no more\n`);
}
