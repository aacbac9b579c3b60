import type { CAC } from 'cac';
import type { Fleet, FleetPlan, Run, RunPlan } from '../../api/objects.js';
import type { FleetSpec, RunSpec } from '../../api/spec.js';
import { optionTexts } from '../args.js';
import type { ApiClient } from '../client.js';
import { connect, projectFlag } from '../connect.js';
import { action, CliError } from '../errors.js';
import { renderFleets } from '../fleet-table.js';
import { exitCodeOf, followRun } from '../follow.js';
import { renderFleetPlan, renderRunPlan } from '../plan.js';
import { StatusDisplay } from '../progress.js';
import { confirm, ensureCanConfirm } from '../prompt.js';
import { loadSpecs, type LoadedSpec } from '../spec-files.js';
import { collectFiles } from '../upload.js';

interface ApplyFlags {
  yes?: boolean;
  detach?: boolean;
}

export function registerApply(cli: CAC): void {
  cli.command('apply', 'Create or update fleets and submit runs from YAML files, then follow the run')
    .option('-f, --file <path>', 'A YAML file, or a folder of them (may be repeated)')
    .option('-y, --yes', 'Apply without asking for confirmation')
    .option('-d, --detach', 'Return right after submitting, printing the run name')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator apply -f examples/tasks/hello.yml -y')
    .action(action(async (flags: ApplyFlags) => apply(flags)));
}

async function apply(flags: ApplyFlags): Promise<number> {
  const paths = optionTexts(['f', 'file']);
  if (paths.length === 0) throw new CliError('give the configuration with -f FILE (or -f FOLDER)');
  const { specs, errors } = loadSpecs(paths, process.env);
  if (errors.length > 0) {
    for (const line of errors) process.stderr.write(`${line}\n`);
    throw new CliError(`the configuration has ${errors.length} ${errors.length === 1 ? 'error' : 'errors'}; nothing was applied`);
  }
  const yes = flags.yes === true;
  ensureCanConfirm(yes, 'apply');
  const client = connect();
  const runs: Run[] = [];
  for (const loaded of specs) {
    if (loaded.spec.type === 'fleet') {
      await applyFleet(client, loaded.spec, yes);
    } else {
      const run = await submitRun(client, loaded, yes);
      if (run) runs.push(run);
    }
  }
  if (runs.length === 0) return 0;
  if (flags.detach === true || runs.length > 1) {
    for (const run of runs) process.stdout.write(`${run.name}\n`);
    if (runs.length > 1) process.stderr.write(`follow one with: orchestrator logs -f NAME${projectFlag()}\n`);
    return 0;
  }
  return followSubmitted(client, runs[0]!);
}

async function applyFleet(client: ApiClient, spec: FleetSpec, yes: boolean): Promise<void> {
  const plan = await client.post<FleetPlan>(client.projectPath('/fleets/plan'), { spec });
  const current = plan.action === 'update' ? (await client.get<Fleet>(client.projectPath(`/fleets/${encodeURIComponent(spec.name)}`))).spec : null;
  process.stderr.write(renderFleetPlan(spec, plan, current));
  if (plan.action === 'unchanged') {
    process.stderr.write(`fleet ${spec.name} is already up to date\n\n`);
    return;
  }
  if (!(await confirm(`${plan.action === 'create' ? 'Create' : 'Update'} fleet ${spec.name}?`, yes))) {
    process.stderr.write(`fleet ${spec.name} not applied\n\n`);
    return;
  }
  const fleet = await client.post<Fleet>(client.projectPath('/fleets/apply'), { spec });
  process.stderr.write(`fleet ${fleet.name}: ${plan.action === 'create' ? 'created' : `updated to generation ${fleet.generation}`}\n`);
  process.stdout.write(renderFleets([fleet]));
  process.stderr.write('\n');
}

async function submitRun(client: ApiClient, loaded: LoadedSpec, yes: boolean): Promise<Run | null> {
  const spec = loaded.spec as RunSpec;
  const files = spec.type !== 'dev-environment' && spec.files ? collectFiles(spec.files, loaded.baseDir) : [];
  const plan = await client.post<RunPlan>(client.projectPath('/runs/plan'), { spec });
  process.stderr.write(renderRunPlan(spec, plan));
  const label = plan.name ? `${spec.type} ${plan.name}` : spec.type;
  if (!(await confirm(`Submit ${label}?`, yes))) {
    process.stderr.write(`${label} not submitted\n`);
    return null;
  }
  const run = await client.post<Run>(client.projectPath('/runs/apply'), { spec, files });
  process.stderr.write(`${run.kind} ${run.name} submitted\n`);
  return run;
}

async function followSubmitted(client: ApiClient, submitted: Run): Promise<number> {
  const display = new StatusDisplay();
  display.update(submitted.status, submitted.statusMessage);
  const outcome = await followRun(client, submitted.name, display);
  if (outcome.kind === 'interrupted') {
    process.stderr.write([
      `detached from ${submitted.name}; it keeps running`,
      `  follow it again: orchestrator logs -f ${submitted.name}${projectFlag()}`,
      `  stop it:         orchestrator stop ${submitted.name}${projectFlag()}`,
      '',
    ].join('\n'));
    return 130;
  }
  const { run } = outcome;
  const failedByItsCode = run.status === 'failed' && run.exitCode !== null && run.exitCode > 0;
  if (run.status !== 'done' && !failedByItsCode) {
    process.stderr.write(`error: ${run.name} ${run.status}: ${run.statusMessage || run.terminationReason || 'no reason given'}\n`);
  }
  return exitCodeOf(run);
}
