import type { CAC } from 'cac';
import { formatUtc } from '../../api/cron.js';
import { isDeepStrictEqual } from 'node:util';
import type { Gateway, GatewaySpec } from '../../api/gateways.js';
import type { ApplyItem, ApplyResult, Fleet, FleetPlan, Run, RunPlan, RunSchedule } from '../../api/objects.js';
import type { ConfigSpec } from '../../api/parse.js';
import { serviceSettings } from '../../api/service-settings.js';
import type { FleetSpec, RunSpec, ServiceSpec } from '../../api/spec.js';
import { optionTexts } from '../args.js';
import { ApiRequestError, type ApiClient } from '../client.js';
import { connect, projectFlag } from '../connect.js';
import { action, CliError } from '../errors.js';
import { writeOutputInOrder } from '../output-order.js';
import { renderFleets } from '../fleet-table.js';
import { renderGateways } from '../gateway-table.js';
import { exitCodeOf, followRun } from '../follow.js';
import { renderFleetPlan, renderRunPlan } from '../plan.js';
import { StatusDisplay } from '../progress.js';
import { confirm, ensureCanConfirm } from '../prompt.js';
import { followService, serviceAddresses } from '../service-progress.js';
import { loadSpecs, type LoadedSpec } from '../spec-files.js';
import { choosePorts, portRequests, type PortForwarder } from '../port-forwarding.js';
import { accessLines, startForwarding } from '../run-access.js';
import { refreshFromServer, sshConfigWarning } from '../ssh-config.js';
import { leavesSshConfig, prepareSsh, reachedOverSsh } from '../ssh-setup.js';

interface ApplyFlags {
  yes?: boolean;
  detach?: boolean;
  queue?: boolean;
  sshConfig?: boolean;
}

export function registerApply(cli: CAC): void {
  cli.command('apply', 'Create or update fleets and submit runs from YAML files, then follow the run')
    .usage('apply -f FILE [options]')
    .option('-f, --file <path>', 'A YAML file, or a folder of them (may be repeated)')
    .option('-y, --yes', 'Apply without asking for confirmation')
    .option('-d, --detach', 'Return right after submitting, printing the run name')
    .option('--queue', 'Submit a run whose plan names a problem that holds it (no fleet for it, nothing that can host it): it waits in the queue for a fleet, or fails')
    .option('--no-ssh-config', 'Leave ~/.ssh/config alone (so does ORCHESTRATOR_NO_SSH_CONFIG=1); by default apply adds one Include line at its top, once')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator apply -f examples/tasks/hello.yml -y')
    .example('orchestrator apply -f train.yml -y -- --epochs 3   # the words after -- fill ${{ run.args }} in commands')
    .action(action(async (flags: ApplyFlags) => {
      writeOutputInOrder();
      return apply(flags);
    }));
}

async function apply(flags: ApplyFlags): Promise<number> {
  const paths = optionTexts(['f', 'file']);
  if (paths.length === 0) throw new CliError('give the configuration with -f FILE (or -f FOLDER)');
  const { specs, errors } = loadSpecs(paths, process.env, argsAfterDashes(process.argv.slice(2)));
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
    const { spec } = loaded;
    const wanted = spec.type === 'gateway' ? await planGateway(client, spec, yes)
      : spec.type === 'fleet' ? await planFleet(client, spec, yes) : await planRun(client, { ...loaded, spec }, fleets, yes, flags.queue === true);
    if (wanted) confirmed.push(loaded);
  }
  if (confirmed.length === 0) return 0;
  const confirmedRuns = confirmed.map((c) => c.spec).filter((spec): spec is RunSpec => spec.type !== 'fleet' && spec.type !== 'gateway');
  // A busy explicit local port is said before anything is submitted.
  if (flags.detach !== true && confirmedRuns.length === 1) await choosePorts(portRequests(forwardedPorts(confirmedRuns[0]!)));
  // The key is registered for every run; ~/.ssh/config is asked about only for a run one reaches over SSH.
  if (confirmedRuns.length > 0) await prepareSsh(client, yes, leavesSshConfig(flags) || !confirmedRuns.some(reachedOverSsh));
  const runs = reportApplied(await applyTogether(client, confirmed));
  if (runs.length === 0) return 0;
  if (flags.detach === true || runs.length > 1) {
    for (const run of runs) process.stdout.write(`${run.name}\n`);
    if (runs.length > 1) process.stderr.write(`follow one with: orchestrator logs -f NAME${projectFlag()}\n`);
    return 0;
  }
  return runs[0]!.kind === 'service' ? followSubmittedService(client, runs[0]!) : followSubmitted(client, runs[0]!);
}

/** The words after the first `--`, exactly as typed, for `${{ run.args }}`. */
function argsAfterDashes(argv: readonly string[]): string[] {
  const dashes = argv.indexOf('--');
  return dashes < 0 ? [] : argv.slice(dashes + 1);
}

/** Once the run runs: its entry in ~/.orchestrator/ssh/config, and how to use it (a dev environment's IDE link too). */
async function announceSsh(client: ApiClient, run: Run, display: StatusDisplay | null): Promise<void> {
  const text = (await accessLines(client, run)).map((line) => `${line}\n`).join('');
  const write = () => process.stderr.write(text);
  if (display) display.around(write);
  else write();
}

/** Shows the fleet's plan; whether the user wants it applied. */
async function planFleet(client: ApiClient, spec: FleetSpec, yes: boolean): Promise<boolean> {
  const plan = await client.post<FleetPlan>(client.projectPath('/fleets/plan'), { spec });
  const current = plan.action === 'update' ? (await client.get<Fleet>(client.projectPath(`/fleets/${encodeURIComponent(spec.name)}`))).spec : null;
  process.stderr.write(renderFleetPlan(spec, plan, current));
  if (plan.action === 'unchanged' && spec.ssh_config) {
    // Applying it again is how hosts that failed are tried again.
    process.stderr.write(`fleet ${spec.name} is already up to date; hosts that failed are tried again\n\n`);
    return true;
  }
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

/** Says what applying the gateway does (create, update, nothing); whether the user wants it applied. */
async function planGateway(client: ApiClient, spec: GatewaySpec, yes: boolean): Promise<boolean> {
  const path = client.projectPath(`/gateways/${encodeURIComponent(spec.name)}`);
  const current = await client.get<Gateway>(path).catch((error: unknown) => {
    if (error instanceof ApiRequestError && error.status === 404) return null;
    throw error;
  });
  if (current && isDeepStrictEqual(current.spec, spec)) {
    process.stderr.write(`gateway ${spec.name} is already up to date\n\n`);
    return false;
  }
  const certificates = spec.certificate?.type ?? 'lets-encrypt';
  process.stderr.write([
    `gateway ${spec.name}: ${current ? 'update (its process restarts)' : 'create'}`,
    `  domain:       ${spec.domain}${spec.default ? ' (the project\'s default)' : ''}`,
    `  backend:      ${spec.backend ?? 'local'}, HTTP on ${spec.http_port ?? 80}, HTTPS on ${spec.https_port ?? 443}`,
    `  certificates: ${certificates === 'none' ? 'none, HTTP only' : certificates === 'manual' ? `from ${spec.certificate!.cert_file}` : `per service from ${spec.certificate?.acme_server ?? 'Let\'s Encrypt'}`}`,
    '',
  ].join('\n'));
  if (!(await confirm(`${current ? 'Update' : 'Create'} gateway ${spec.name}?`, yes))) {
    process.stderr.write(`gateway ${spec.name} not applied\n\n`);
    return false;
  }
  return true;
}

/**
 * Shows the run's plan, counting the fleets of this apply as already there; whether the user wants it submitted.
 * A problem that holds the run ends the apply, with nothing applied, unless `queue` asks to submit it anyway.
 */
async function planRun(client: ApiClient, { spec, file }: LoadedSpec & { spec: RunSpec }, fleets: FleetSpec[], yes: boolean, queue: boolean): Promise<boolean> {
  const plan = await client.post<RunPlan>(client.projectPath('/runs/plan'), { spec, ...(fleets.length > 0 ? { fleets } : {}) });
  process.stderr.write(renderRunPlan(spec, plan));
  const label = plan.name ? `${spec.type} ${plan.name}` : spec.type;
  if (plan.blocking === 'name_in_use') throw new CliError(`nothing was applied: ${file}: ${plan.problem}`);
  if (plan.blocking && plan.problem && !queue) {
    const problem = plan.problem.replace(/^waiting: /, '');
    throw new CliError(plan.blocking === 'no_fleet'
      ? `${label} not submitted, as no fleet is there for it: ${problem}; nothing was applied (--queue submits it to wait in the queue)`
      : `${label} not submitted, as it would fail at once: ${problem}; nothing was applied (--queue submits it anyway)`);
  }
  if (!(await confirm(`${plan.schedule ? 'Schedule' : 'Submit'} ${label}?`, yes))) {
    process.stderr.write(`${label} not submitted\n`);
    return false;
  }
  return true;
}

/** Sends everything confirmed in one request: the server writes all of it, or none. */
async function applyTogether(client: ApiClient, confirmed: LoadedSpec[]): Promise<ApplyResult> {
  const items: ApplyItem[] = confirmed.map(({ spec, files, repos }) => (spec.type === 'fleet' || spec.type === 'gateway' ? { spec } : { spec, files, repos }));
  try {
    return await client.post<ApplyResult>(client.projectPath('/apply'), { items });
  } catch (error) {
    if (!(error instanceof ApiRequestError)) throw error;
    const named = error.message.replace(/items\[(\d+)\]/g, (whole, index: string) => confirmed[Number(index)]?.file ?? whole);
    throw new CliError(named);
  }
}

/** Says what became of each fleet and run; returns the runs to follow (a schedule's runs come later). */
function reportApplied(result: ApplyResult): Run[] {
  const runs: Run[] = [];
  for (const item of result.items) {
    if (item.kind === 'run' && item.run.schedule) {
      process.stderr.write(scheduledLines(item.run, item.run.schedule));
      process.stdout.write(`${item.run.name}\n`);
      continue;
    }
    if (item.kind === 'run') {
      process.stderr.write(`${item.run.kind} ${item.run.name} submitted\n`);
      runs.push(item.run);
      continue;
    }
    if (item.kind === 'gateway') {
      const { gateway, action } = item;
      process.stderr.write(`gateway ${gateway.name}: ${{ create: 'created', update: 'updated', unchanged: 'already up to date' }[action]}\n`);
      process.stdout.write(renderGateways([gateway]));
      process.stderr.write('\n');
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

/** What a schedule's apply did, and how to see and end it. */
function scheduledLines(run: Run, schedule: RunSchedule): string {
  const next = schedule.nextRunAt ? `next run at ${formatUtc(new Date(schedule.nextRunAt))}` : 'no next run';
  return [
    `${run.kind} ${run.name} ${run.generation > 1 ? `updated to generation ${run.generation}` : 'scheduled'}: ${next} (${schedule.cron.join(', ')}, UTC)`,
    `  see it and its runs: orchestrator ps${projectFlag()}`,
    `  end its schedule:    orchestrator stop ${run.name}${projectFlag()}`,
    '',
  ].join('\n');
}

/** The ports that following the run forwards: a service's are published by the proxy instead, and a schedule is not followed. */
function forwardedPorts(spec: ConfigSpec): (number | string)[] {
  return (spec.type === 'task' || spec.type === 'dev-environment') && !spec.schedule ? spec.ports ?? [] : [];
}

function unfinishedRunError(run: Run): string {
  return `error: ${run.name} ${run.status}: ${run.statusMessage || run.terminationReason || 'no reason given'}\n`;
}

/** Follows a service until it serves: prints where it is reached (stdout) and exits 0; 1 when it ends or its rollout stalls before. */
async function followSubmittedService(client: ApiClient, submitted: Run): Promise<number> {
  const outcome = await followService(client, submitted.name, new StatusDisplay());
  if (outcome.kind === 'interrupted') {
    process.stderr.write([
      `detached from ${submitted.name}; the service keeps starting`,
      `  see its replicas: orchestrator ps${projectFlag()}`,
      `  stop it:          orchestrator stop ${submitted.name}${projectFlag()}`,
      '',
    ].join('\n'));
    return 130;
  }
  const { run } = outcome;
  if (outcome.kind === 'ended') {
    process.stderr.write(unfinishedRunError(run));
    return 1;
  }
  if (outcome.kind === 'stalled') {
    process.stderr.write([
      `error: ${run.name}: ${run.statusMessage}`,
      `  fix the spec and apply it again, or put back generation ${run.service!.stableGeneration}: orchestrator service rollback ${run.name}${projectFlag()}`,
      '',
    ].join('\n'));
    return 1;
  }
  if (outcome.kind === 'at-zero') process.stderr.write(`${run.name} has no replica running; ${serviceSettings(run.spec as ServiceSpec).groups.some((group) => group.scaling) ? 'the first request starts one' : 'replicas: 0 starts none'}\n`);
  process.stdout.write(serviceAddresses(client.url, run.service!));
  await announceSsh(client, run, null).catch(sshConfigWarning);
  return 0;
}

/** How long a plain task runs before apply says how to ssh into it: one that ends sooner is not worth entering. */
const SSH_HINT_AFTER_MS = 3000;

/**
 * A run's status display that, once the run has been running `afterMs` (at once with 0), says how to ssh into it;
 * never for a run that ended sooner.
 */
class RunDisplay extends StatusDisplay {
  announced: Promise<void> | null = null;
  private pending: NodeJS.Timeout | null = null;

  constructor(private readonly onRunning: (display: StatusDisplay) => Promise<void>, private readonly afterMs: number) {
    super();
  }

  override update(status: string, message: string): void {
    super.update(status, message);
    if (status !== 'running' || this.announced || this.pending) return;
    if (this.afterMs === 0) this.announce();
    else this.pending = setTimeout(() => this.announce(), this.afterMs);
  }

  override stop(): void {
    if (this.pending) clearTimeout(this.pending);
    super.stop();
  }

  private announce(): void {
    this.announced = this.onRunning(this).catch(sshConfigWarning);
  }
}

/**
 * Follows a task or dev environment: its logs, and once it runs, how to reach it and its ports forwarded to
 * localhost (a dev environment always holds a connection, so that it counts as in use) until it ends or Ctrl-C.
 */
async function followSubmitted(client: ApiClient, submitted: Run): Promise<number> {
  const requests = portRequests(forwardedPorts(submitted.spec as RunSpec));
  const holdsConnection = requests.length > 0 || submitted.kind === 'dev-environment';
  let forwarder: PortForwarder | null = null;
  const display = new RunDisplay(async (shown) => {
    await announceSsh(client, submitted, shown);
    if (holdsConnection) forwarder = await startForwarding(client, submitted.name, requests, (text) => shown.around(() => process.stderr.write(text)));
  }, holdsConnection ? 0 : SSH_HINT_AFTER_MS);
  display.update(submitted.status, submitted.statusMessage);
  const outcome = await followRun(client, submitted.name, display);
  if (display.announced) {
    await display.announced;
    await (forwarder as PortForwarder | null)?.stop();
    // The run's entry goes once it ended; a detached run keeps it.
    if (outcome.kind === 'finished') await refreshFromServer(client).catch(sshConfigWarning);
  }
  if (outcome.kind === 'interrupted') {
    process.stderr.write([
      `detached from ${submitted.name}; it keeps running`,
      `  follow it again: orchestrator logs -f ${submitted.name}${projectFlag()}`,
      `  attach again:    orchestrator attach ${submitted.name}${projectFlag()}`,
      `  stop it:         orchestrator stop ${submitted.name}${projectFlag()}`,
      '',
    ].join('\n'));
    return 130;
  }
  const { run } = outcome;
  const failedByItsCode = run.status === 'failed' && run.exitCode !== null && run.exitCode > 0;
  if (run.status !== 'done' && !failedByItsCode) process.stderr.write(unfinishedRunError(run));
  return exitCodeOf(run);
}
