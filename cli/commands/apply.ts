import type { CAC } from 'cac';
import type { ApplyItem, ApplyResult, Fleet, FleetPlan, Run, RunPlan } from '../../api/objects.js';
import type { FleetSpec, RunSpec } from '../../api/spec.js';
import { optionTexts } from '../args.js';
import { ApiRequestError, type ApiClient } from '../client.js';
import { connect, projectFlag } from '../connect.js';
import { action, CliError } from '../errors.js';
import { renderFleets } from '../fleet-table.js';
import { exitCodeOf, followRun } from '../follow.js';
import { renderFleetPlan, renderRunPlan } from '../plan.js';
import { StatusDisplay } from '../progress.js';
import { confirm, ensureCanConfirm } from '../prompt.js';
import { loadSpecs, type LoadedSpec } from '../spec-files.js';

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
  const confirmed: LoadedSpec[] = [];
  for (const loaded of specs) {
    const fleets = confirmed.map((c) => c.spec).filter((spec): spec is FleetSpec => spec.type === 'fleet');
    const wanted = loaded.spec.type === 'fleet' ? await planFleet(client, loaded.spec, yes) : await planRun(client, loaded.spec, fleets, yes);
    if (wanted) confirmed.push(loaded);
  }
  if (confirmed.length === 0) return 0;
  const runs = reportApplied(await applyTogether(client, confirmed));
  if (runs.length === 0) return 0;
  if (flags.detach === true || runs.length > 1) {
    for (const run of runs) process.stdout.write(`${run.name}\n`);
    if (runs.length > 1) process.stderr.write(`follow one with: orchestrator logs -f NAME${projectFlag()}\n`);
    return 0;
  }
  return followSubmitted(client, runs[0]!);
}

/** Shows the fleet's plan; whether the user wants it applied. */
async function planFleet(client: ApiClient, spec: FleetSpec, yes: boolean): Promise<boolean> {
  const plan = await client.post<FleetPlan>(client.projectPath('/fleets/plan'), { spec });
  const current = plan.action === 'update' ? (await client.get<Fleet>(client.projectPath(`/fleets/${encodeURIComponent(spec.name)}`))).spec : null;
  process.stderr.write(renderFleetPlan(spec, plan, current));
  if (plan.action === 'unchanged') {
    process.stderr.write(`fleet ${spec.name} is already up to date\n\n`);
    return false;
  }
  if (!(await confirm(`${plan.action === 'create' ? 'Create' : 'Update'} fleet ${spec.name}?`, yes))) {
    process.stderr.write(`fleet ${spec.name} not applied\n\n`);
    return false;
  }
  return true;
}

/** Shows the run's plan, counting the fleets of this apply as already there; whether the user wants it submitted. */
async function planRun(client: ApiClient, spec: RunSpec, fleets: FleetSpec[], yes: boolean): Promise<boolean> {
  const plan = await client.post<RunPlan>(client.projectPath('/runs/plan'), { spec, ...(fleets.length > 0 ? { fleets } : {}) });
  process.stderr.write(renderRunPlan(spec, plan));
  const label = plan.name ? `${spec.type} ${plan.name}` : spec.type;
  if (!(await confirm(`Submit ${label}?`, yes))) {
    process.stderr.write(`${label} not submitted\n`);
    return false;
  }
  return true;
}

/** Sends everything confirmed in one request: the server writes all of it, or none. */
async function applyTogether(client: ApiClient, confirmed: LoadedSpec[]): Promise<ApplyResult> {
  const items: ApplyItem[] = confirmed.map(({ spec, files }) => (spec.type === 'fleet' ? { spec } : { spec, files }));
  try {
    return await client.post<ApplyResult>(client.projectPath('/apply'), { items });
  } catch (error) {
    if (!(error instanceof ApiRequestError)) throw error;
    const named = error.message.replace(/items\[(\d+)\]/g, (whole, index: string) => confirmed[Number(index)]?.file ?? whole);
    throw new CliError(named);
  }
}

/** Says what became of each fleet and run; returns the runs. */
function reportApplied(result: ApplyResult): Run[] {
  const runs: Run[] = [];
  for (const item of result.items) {
    if (item.kind === 'run') {
      process.stderr.write(`${item.run.kind} ${item.run.name} submitted\n`);
      runs.push(item.run);
      continue;
    }
    const { fleet, action } = item;
    const outcome = { create: 'created', update: `updated to generation ${fleet.generation}`, unchanged: 'already up to date' }[action];
    process.stderr.write(`fleet ${fleet.name}: ${outcome}\n`);
    process.stdout.write(renderFleets([fleet]));
    process.stderr.write('\n');
  }
  return runs;
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
