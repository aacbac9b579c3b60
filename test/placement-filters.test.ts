import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Run, RunPlan } from '../api/objects.js';
import { runCli, show, type CliResult } from './helpers/cli.js';
import { useLocalCliSuite } from './helpers/local-cli-hooks.js';
import { eventually } from './helpers/server.js';

/** A plan's `problem` line. */
function problemLine(stderr: string): string | undefined {
  return /^ {2}problem {6}(.*)$/m.exec(stderr)?.[1];
}

// The database plays no part in choosing fleets: one is enough.
describe('backends and fleets of a run narrow where it goes (local backend, two fleets, pglite)', function () {
  this.timeout(90_000);
  const current = useLocalCliSuite('pglite');

  const apply = async (name: string, lines: string[], ...flags: string[]): Promise<CliResult> => {
    const file = join(current().work, `${name}.yml`);
    writeFileSync(file, `${lines.join('\n')}\n`);
    return runCli(['apply', '-f', file, '-y', '--no-ssh-config', ...flags], { home: current().home.home, cwd: current().work });
  };
  const task = (name: string, ...lines: string[]) => ['type: task', `name: ${name}`, ...lines];
  const runOf = async (name: string) => (await current().server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
  const abort = (name: string) => current().server.api('POST', `/api/projects/main/runs/${name}/stop`, { abort: true });

  before(async () => {
    const second = await apply('second', ['type: fleet', 'name: second', 'backends: [local]', 'nodes: 0..1']);
    expect(second.code, show(second)).to.equal(0);
  });

  it('places a run that names a fleet on that fleet, though an idle instance of another one could take it', async () => {
    const anywhere = await apply('anywhere', task('anywhere', 'commands: ["true"]'));
    expect(anywhere.code, show(anywhere)).to.equal(0);
    expect((await runOf('anywhere')).fleet).to.equal('local');

    const spec = { type: 'task', commands: ['true'], fleets: ['second'] };
    const plan = (await current().server.api('POST', '/api/projects/main/runs/plan', { spec })).body as RunPlan;
    expect(plan.fleets).to.deep.equal(['second']);
    expect(plan.instance).to.equal(null);

    const named = await apply('named', task('named', 'fleets: [second]', 'commands: ["true"]'));
    expect(named.code, show(named)).to.equal(0);
    expect((await runOf('named')).fleet).to.equal('second');
  });

  it('keeps a run in the queue while its fleet is full, saying which fleets it may not take', async () => {
    const holder = await apply('holder', task('holder', 'fleets: [second]', 'commands: ["sleep 60"]'), '-d');
    expect(holder.code, show(holder)).to.equal(0);
    await eventually(async () => (await runOf('holder')).status === 'running', 30_000, 'holder running');
    const waiting = await apply('behind', task('behind', 'fleets: [second]', 'commands: ["true"]'), '-d');
    expect(waiting.code, show(waiting)).to.equal(0);
    const reason = 'waiting: fleet second is at its maximum of 1 node: 1 busy; fleet local is not among fleets: [second]';
    expect(problemLine(waiting.stderr), waiting.stderr).to.equal(reason);
    await eventually(async () => (await runOf('behind')).statusMessage === reason, 10_000, 'the queue reason');
    await abort('behind');
    await abort('holder');
  });

  it('keeps a run whose backends no fleet has in the queue, saying so in the plan and the queue, once submitted with --queue', async () => {
    const reason = 'waiting: no fleet of backend gpucloud: fleet local uses local, not among backends: [gpucloud]; '
      + 'fleet second uses local, not among backends: [gpucloud]; the run waits until one is applied';
    const refused = await apply('cloud-only', task('cloud-only', 'backends: [gpucloud]', 'commands: ["true"]'), '-d');
    expect(refused.code, show(refused)).to.equal(1);
    expect(refused.stderr).to.match(/^error: task cloud-only not submitted, as no fleet is there for it: no fleet of backend gpucloud: .*; nothing was applied \(--queue submits it to wait in the queue\)$/m);
    const applied = await apply('cloud-only', task('cloud-only', 'backends: [gpucloud]', 'commands: ["true"]'), '-d', '--queue');
    expect(applied.code, show(applied)).to.equal(0);
    expect(problemLine(applied.stderr), applied.stderr).to.equal(reason);
    const run = await eventually(async () => {
      const seen = await runOf('cloud-only');
      return seen.statusMessage === reason && seen;
    }, 10_000, 'the queue reason');
    expect(run.status).to.equal('submitted');
    await abort('cloud-only');
  });
});
