import { expect } from 'chai';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Fleet, Run, RunLogsPage } from '../api/objects.js';
import { FINISHED_RUN_STATUSES } from '../api/status.js';
import { makeHome, runCli, show } from './helpers/cli.js';
import { useLocalCliSuite } from './helpers/local-cli-hooks.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually } from './helpers/server.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures', 'dstack');
const configs = readdirSync(FIXTURES).filter((name) => name.endsWith('.dstack.yml')).sort();
const refused = configs.filter((name) => readdirSync(FIXTURES).includes(name.replace(/\.dstack\.yml$/, '.expected')));
const accepted = configs.filter((name) => !refused.includes(name));

describe('dstack configurations: refused by name', () => {
  const home = makeHome();
  after(() => home.remove());

  it('has both accepted and refused fixtures', () => {
    expect(accepted).to.include.members(['task.dstack.yml', 'multi-node.dstack.yml', 'service.dstack.yml', 'dev-environment.dstack.yml', 'fleet.dstack.yml', 'ssh-fleet.dstack.yml']);
    expect(refused).to.include.members(['replica-groups.dstack.yml', 'tpu.dstack.yml', 'aws-fleet.dstack.yml']);
    expect(refused, 'forms that misled before, each now refused by name').to.include.members([
      'replica-group-fields.dstack.yml', 'network-volumes.dstack.yml', 'imported.dstack.yml', 'backends.dstack.yml',
      'run-access.dstack.yml', 'several.dstack.yml', 'model-format.dstack.yml', 'router-group.dstack.yml',
    ]);
    expect(accepted).to.include.members(['accelerators.dstack.yml', 'cluster-fleet.dstack.yml', 'blocks-fleet.dstack.yml', 'replica-list.dstack.yml', 'replica-groups-named.dstack.yml',
      'ssh-blocks-fleet.dstack.yml', 'replica-group-python.dstack.yml', 'repo-if-exists.dstack.yml',
      'docker-in-run.dstack.yml', 'nvcc.dstack.yml', 'nvcc-python.dstack.yml', 'ssh-fleet-env.dstack.yml', 'spot-fleet.dstack.yml']);
  });

  for (const name of refused) {
    it(`refuses ${name} with one line per missing feature and nothing that follows from it`, async () => {
      const expected = readFileSync(join(FIXTURES, name.replace(/\.dstack\.yml$/, '.expected')), 'utf8').trimEnd().split('\n');
      const result = await runCli(['apply', '-f', name, '-y'], { cwd: FIXTURES, home: home.home });
      expect(result.code, show(result)).to.equal(1);
      const lines = result.stderr.trimEnd().split('\n');
      expect(lines.slice(0, -1), show(result)).to.deep.equal(expected);
      expect(lines.at(-1)).to.match(/^error: the configuration has \d+ errors?; nothing was applied$/);
    });
  }
});

for (const kind of DATABASE_KINDS) {
  describe(`dstack configurations: accepted with the same meaning (${kind})`, function () {
    this.timeout(90_000);
    const current = useLocalCliSuite(kind);
    const api = async <T>(path: string) => (await current().server.api('GET', `/api/projects/main${path}`)).body as T;

    const plans = new Map<string, string>();

    it('applies each of the four kinds through the CLI', async () => {
      for (const name of accepted) {
        const result = await runCli(['apply', '-f', join(FIXTURES, name), '-y', '-d', '--no-ssh-config', '--queue'], { home: current().home.home, cwd: current().work });
        expect(result.code, `${name}\n${show(result)}`).to.equal(0);
        plans.set(name, result.stderr);
      }
    });

    it('says in the plan where dstack\'s default resources differ: a part left out takes any amount here', () => {
      expect(plans.get('dev-environment.dstack.yml')).to.contain(
        '  resources    8 MI300X GPUs\n               cpu, memory and disk not given: any amount here (dstack\'s defaults: cpu 2.., memory 8GB.., disk 100GB..)\n',
      );
      expect(plans.get('task.dstack.yml')).not.to.contain('not given');
    });

    it('keeps docker: true and nvcc: true, and says in the plan that an instance running jobs as processes has neither a Docker daemon nor the image with nvcc', async () => {
      expect((await api<Run>('/runs/docker-nvidia-smi')).spec).to.include({ docker: true });
      expect((await api<Run>('/runs/train-nvcc')).spec).to.include({ nvcc: true, python: '3.12' });
      expect((await api<Run>('/runs/trl-train')).spec, 'nvcc: true with another Python, in a virtual environment of it').to.include({ nvcc: true, python: '3.10' });
      expect(plans.get('nvcc.dstack.yml')).to.contain('nvcc: not used: this instance runs jobs as processes on the machine itself, without the image that has the CUDA compiler');
      expect(plans.get('docker-in-run.dstack.yml')).to.contain('docker: not used: this instance runs jobs as processes on the machine itself, without a container, so no Docker daemon is started for the run');
    });

    it('says in the plan that placement: cluster on an SSH fleet asks for nothing more', () => {
      expect(plans.get('ssh-fleet.dstack.yml')).to.contain('  ignored      placement: nothing more to do on an SSH fleet: its hosts reach each other at their internal addresses (internal_ip, network or hostname) already\n');
      expect(plans.get('cluster-fleet.dstack.yml')).not.to.contain('ignored');
    });

    it('shows each replica group in the plan: its count, resources and what it runs of its own', () => {
      const plan = plans.get('replica-list.dstack.yml')!;
      expect(plan).to.contain('  groups       0: 1..2 replicas, 1 GPU with 48 GB, its own commands\n               1: 1..4 replicas, 1 GPU with 24 GB, its own commands\n');
      expect(plan, 'the plan places a replica of the first group').to.match(/^ {2}problem {6}no offers: no local offer matches 48GB:1 in fleet local;/m);
      expect(plan).not.to.contain('  resources ');
      expect(plans.get('replica-group-python.dstack.yml')).to.contain('  groups       gpu: 1 replica, 1 GPU with 24 GB, its own commands\n               small: 1 replica, 1 GPU with 16 GB, its own commands, python\n');
    });

    it('keeps each SSH host\'s own blocks, a repo\'s if_exists, and a replica group\'s own Python in place of the service\'s image', async () => {
      const fleet = await api<Fleet>('/fleets/my-ssh-fleet');
      expect((fleet.spec.ssh_config as { hosts: unknown[] }).hosts).to.deep.equal([
        { hostname: '3.255.177.61', blocks: 4 }, { hostname: '3.255.177.62', blocks: 'auto' }, { hostname: '3.255.177.63', blocks: 1 },
      ]);
      expect((await api<Run>('/runs/trl-sft')).spec.repos).to.deep.equal([{ url: 'https://github.com/huggingface/trl.git', path: '/my-repo', if_exists: 'skip' }]);
      const service = await api<Run>('/runs/mixed-groups');
      expect((service.spec.replicas as Array<Record<string, unknown>>).map((g) => [g.name, g.python ?? null])).to.deep.equal([['gpu', null], ['small', '3.12']]);
    });

    it('knows the accelerators of dstack\'s docs: GB10, and a Tenstorrent Galaxy\'s 32 chips', async () => {
      expect((await api<Run>('/runs/spark')).spec.resources).to.deep.equal({ gpu: 'GB10' });
      expect((await api<Run>('/runs/tt-galaxy')).spec.resources).to.deep.equal({ gpu: 'tt-galaxy-wh:32' });
    });

    it('keeps what dstack means: a fleet\'s nodes map is its range, a task\'s nodes its instances, placement any is the default and cluster and blocks are kept, gateway false keeps a service off gateways, a rate limit\'s key map is its key', async () => {
      const fleet = await api<Fleet>('/fleets/h100s');
      expect(fleet.spec).to.include({ nodes: '0..2', idle_duration: '1h', placement: 'any' });
      expect((await api<Fleet>('/fleets/my-cluster-fleet')).spec).to.include({ placement: 'cluster' });
      expect((await api<Fleet>('/fleets/my-fleet')).spec).to.include({ blocks: 4 });
      expect((await api<Fleet>('/fleets/my-spot-fleet')).spec).to.include({ spot_policy: 'auto', nodes: '0..2' });
      expect((await api<Fleet>('/fleets/proxied-fleet')).spec.env).to.deep.equal({ HTTP_PROXY: 'http://proxy.example.com:80', HTTPS_PROXY: 'http://proxy.example.com:80', NO_PROXY: 'localhost,127.0.0.1' });
      const service = await api<Run>('/runs/llama');
      expect(service.spec).to.include({ replicas: '1..2', port: 8000, gateway: false, https: false });
      expect(service.spec.rate_limits).to.deep.equal([{ prefix: '/v1', rps: 4, burst: 9, key: 'header', header: 'X-API-Key' }]);
      expect((await api<Run>('/runs/distributed')).spec).to.include({ nodes: 2 });
      const onPrem = await api<Fleet>('/fleets/on-prem');
      expect(onPrem.spec.ssh_config, 'an SSH fleet keeps its hosts').to.deep.equal({ user: 'ubuntu', identity_file: '~/.ssh/id_rsa', hosts: ['3.255.177.51', '3.255.177.52'] });
    });

    it('keeps a service\'s replica groups: each group\'s count, scaling, commands and resources, named by position where dstack gives no name', async () => {
      const llama = await api<Run>('/runs/llama-8b-service');
      const groups = llama.spec.replicas as Array<Record<string, unknown>>;
      expect(groups.map((g) => [g.count, (g.scaling as { target: number }).target, (g.resources as { gpu: string }).gpu])).to.deep.equal([['1..2', 10, '48GB'], ['1..4', 5, '24GB']]);
      const waiting = await eventually(async () => {
        const run = await api<Run>('/runs/llama-8b-service');
        return run.service!.replicas.length === 2 ? run : null;
      }, 30_000, 'a replica of each group, queued for a GPU');
      expect(waiting.service!.replicas.map((r) => r.group).sort()).to.deep.equal(['0', '1']);
      expect(waiting.service!.desiredReplicas).to.equal(2);
      const named = await api<Run>('/runs/replica-groups-test');
      expect((named.spec.replicas as Array<{ name: string; count: string }>).map((g) => [g.name, g.count])).to.deep.equal([['replica-1', '0..2'], ['replica-2', '0..3']]);
      expect(named.service!.desiredReplicas).to.equal(0);
    });

    it('reads dstack\'s spellings of resources into the same requirement', async () => {
      const task = await api<Run>('/runs/train');
      expect(task.spec.resources).to.deep.equal({ gpu: 'nvidia:24GB..:1', cpu: 'x86:4..', memory: '16GB..', disk: '100GB..' });
      expect(task.spec).to.include({ nodes: 1 }).and.not.have.property('creation_policy');
      const dev = await api<Run>('/runs/vscode');
      expect(dev.spec.resources).to.deep.equal({ gpu: 'amd:MI300X:8' });
    });
  });
}

describe('dstack configurations: a fleet\'s env reaches every job on its instances', function () {
  this.timeout(120_000);
  const current = useLocalCliSuite('pglite');

  it('gives a task on the fleet the fleet\'s variables, its own env winning for a name both give', async () => {
    const file = join(current().work, 'fleet-env.yml');
    writeFileSync(file, [
      'type: fleet', 'name: proxied', 'backends: [local]', 'nodes: 0..1',
      'env:', '  - HTTP_PROXY=http://proxy.example.com:80', '  - NO_PROXY=localhost',
      '---',
      'type: task', 'name: through-proxy', 'fleets: [proxied]', 'env:', '  NO_PROXY: 127.0.0.1',
      'commands:', '  - echo "$HTTP_PROXY $NO_PROXY"',
      '',
    ].join('\n'));
    const applied = await runCli(['apply', '-f', file, '-y', '-d', '--no-ssh-config'], { home: current().home.home, cwd: current().work });
    expect(applied.code, show(applied)).to.equal(0);
    const api = async <T>(path: string) => (await current().server.api('GET', `/api/projects/main${path}`)).body as T;
    const run = await eventually(async () => {
      const found = await api<Run>('/runs/through-proxy');
      return FINISHED_RUN_STATUSES.includes(found.status) && found;
    }, 90_000, 'the task to end');
    expect(run.status, run.statusMessage).to.equal('done');
    const page = await api<RunLogsPage>('/runs/through-proxy/logs');
    expect(page.lines.map((line) => line.text)).to.deep.equal(['http://proxy.example.com:80 127.0.0.1']);
  });
});
