import type { CAC } from 'cac';
import type { Run } from '../../api/objects.js';
import { optionTexts } from '../args.js';
import { connect, projectFlag } from '../connect.js';
import { action, CliError } from '../errors.js';
import { writeOutputInOrder } from '../output-order.js';
import { exitCodeOf, followRun, isFinished, runPath } from '../follow.js';
import { portRequests } from '../port-forwarding.js';
import { statusLine } from '../progress.js';
import { accessLines, startForwarding } from '../run-access.js';
import { leavesSshConfig, prepareSsh } from '../ssh-setup.js';

interface AttachFlags {
  logs?: boolean;
  sshConfig?: boolean;
}

export function registerAttach(cli: CAC): void {
  cli.command('attach <run>', 'Attach to a running run started elsewhere or with -d: its SSH entry, its ports forwarded to localhost, until Ctrl-C')
    .option('--port <local:remote>', 'Also forward this port ("8080" or "8080:80"; may be repeated)')
    .option('--logs', 'Also stream the run\'s logs')
    .option('--no-ssh-config', 'Leave ~/.ssh/config alone (so does ORCHESTRATOR_NO_SSH_CONFIG=1); by default attach adds one Include line at its top, once, as apply does')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator attach dev --port 8888:8888')
    .action(action(async (name: string, flags: AttachFlags) => {
      writeOutputInOrder();
      return attach(String(name), flags);
    }));
}

async function attach(name: string, flags: AttachFlags): Promise<number> {
  const client = connect();
  const run = await client.get<Run>(runPath(client, name));
  if (run.status !== 'running') throw new CliError(`run ${name} is ${run.status}; attach reaches a run only while it runs (orchestrator ps${projectFlag()} shows it)`);
  const requests = portRequests([...((run.spec.ports as (number | string)[] | undefined) ?? []), ...optionTexts(['port'])]);
  await prepareSsh(client, false, leavesSshConfig(flags));
  const lines = await accessLines(client, run);
  if (lines.length === 0) throw new CliError(`run ${name} cannot be reached over SSH: its instance's agent gave no host key (an agent older than SSH support?)`);
  const forwarder = await startForwarding(client, name, requests, (text) => process.stderr.write(text));
  for (const line of lines) process.stderr.write(`${line}\n`);
  const interrupted = new Promise<void>((resolve) => process.once('SIGINT', () => resolve()));
  const ended = flags.logs === true ? followRun(client, name, null).then(() => undefined) : forwarder.done;
  await Promise.race([interrupted, ended, forwarder.done]);
  await forwarder.stop();
  const now = await client.get<Run>(runPath(client, name));
  if (isFinished(now)) {
    process.stderr.write(`${statusLine(now.status, now.statusMessage || now.terminationReason || '')}\n`);
    return exitCodeOf(now);
  }
  process.stderr.write(`detached from ${name}; it keeps running (orchestrator attach ${name}${projectFlag()} again)\n`);
  return 130;
}
