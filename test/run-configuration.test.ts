import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Run } from '../api/objects.js';
import { runCli, show, type CliResult } from './helpers/cli.js';
import { useLocalCliSuite } from './helpers/local-cli-hooks.js';
import { DATABASE_KINDS } from './helpers/databases.js';

/** Fields that apply to running something, set on one run of each kind. */
const RUN_FIELDS = [
  'priority: 10', 'env:', '  MODE: test', 'working_dir: /tmp', 'max_duration: 1h', 'stop_duration: 1m', 'privileged: false',
  'shell: bash', 'backends: [local]', 'fleets: [local]', 'spot_policy: on-demand', 'utilization_policy:', '  min_gpu_utilization: 10', '  time_window: 30m',
  'retry:', '  on_events: [error]', '  duration: 10m',
];

for (const kind of DATABASE_KINDS) {
  describe(`one run configuration for every run kind (${kind})`, function () {
    this.timeout(90_000);
    const current = useLocalCliSuite(kind);

    const apply = async (name: string, lines: string[], ...flags: string[]): Promise<CliResult> => {
      const file = join(current().work, `${name}.yml`);
      writeFileSync(file, `${lines.join('\n')}\n`);
      return runCli(['apply', '-f', file, '-y', '-d', '--no-ssh-config', ...flags], { home: current().home.home, cwd: current().work });
    };

    it('accepts the same run fields on a task, a service and a dev environment, and keeps them', async () => {
      const kinds = {
        task: ['type: task', 'name: job', 'commands: ["echo $MODE"]'],
        service: ['type: service', 'name: web', 'commands: ["python3 -m http.server 8000"]', 'port: 8000'],
        devenv: ['type: dev-environment', 'name: box', 'init: ["true"]'],
      };
      for (const [file, head] of Object.entries(kinds)) {
        const result = await apply(file, [...head, ...RUN_FIELDS]);
        expect(result.code, `${file}\n${show(result)}`).to.equal(0);
      }
      for (const name of ['job', 'web', 'box']) {
        const run = (await current().server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
        expect(run.spec, name).to.include({ priority: 10, working_dir: '/tmp', max_duration: '1h', stop_duration: '1m', shell: 'bash', spot_policy: 'on-demand' });
        expect(run.spec.fleets, name).to.deep.equal(['local']);
      }
    });

    it('says where a field of another kind belongs and what it means there', async () => {
      const result = await apply('misplaced', [
        'type: task', 'name: misplaced', 'commands: ["true"]', 'port: 8000', 'ide: vscode', '---',
        'type: dev-environment', 'name: dev', 'commands: ["true"]', 'replicas: 2', '---',
        'type: service', 'name: svc', 'commands: ["true"]', 'port: 80', 'nodes: 2', 'inactivity_duration: 1h',
      ]);
      expect(result.code, show(result)).to.equal(1);
      const lines = result.stderr.split('\n').filter((line) => line.includes('misplaced.yml:')).map((line) => line.replace(/^.*misplaced\.yml:/, ''));
      expect(lines).to.deep.equal([
        '4:1: port: unknown field for a task; port belongs to a service (port the commands listen on); did you mean "ports"?',
        '5:1: ide: unknown field for a task; ide belongs to a dev-environment (desktop IDE that apply gives a link for; left out, the environment is reached with ssh alone)',
        '9:1: commands: unknown field for a dev-environment; commands belongs to a task and a service (shell commands, run in order in one shell)',
        '10:1: replicas: unknown field for a dev-environment; replicas belongs to a service (replicas: n (exactly), min..max with scaling, or a list of replica groups, each with its own count, commands and resources)',
        '16:1: nodes: unknown field for a service; nodes belongs to a fleet (instances the fleet keeps: n (exactly), min..max, or {min, target, max}), and to a task (instances of one fleet the task runs on together, one job on each, all placed at once; the task is done when every node exits 0)',
        '17:1: inactivity_duration: unknown field for a service; inactivity_duration belongs to a dev-environment (stop after this long with no SSH connection open (an IDE and attach hold one): a duration such as 30m or 1h30m, a number of seconds, or off)',
      ]);
    });

    it('takes nodes on a task as a whole number of instances, never a fleet\'s range', async () => {
      const result = await apply('nodes', ['type: task', 'name: nodes', 'commands: ["true"]', 'nodes: 0..2']);
      expect(result.code, show(result)).to.equal(1);
      expect(result.stderr).to.contain('nodes.yml:4:8: nodes: expected an integer of at least 1, got "0..2"');
    });
  });
}
