import { expect } from 'chai';
import type { Fleet, RunPlan } from '../api/objects.js';
import { ONE_DATABASE } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';
import { show } from './helpers/cli.js';
import { eventually } from './helpers/server.js';

const TOO_DEAR = 'no offer at or under $2.00/h: the cheapest matching is H100 at $2.50/h in fleet any; fleet l4 is not among fleets: [any]';

function task(name: string, gpu: string, extra = ''): string {
  return `type: task\nname: ${name}\nfleets: [any]\nresources:\n  gpu: ${gpu}\ncommands:\n  - sleep 300\n${extra}`;
}

for (const kind of ONE_DATABASE) {
  describe(`max_price (${kind})`, function () {
    this.timeout(120_000);
    let suite: GpucloudSuite;
    useGpucloudSuite(kind, (started) => { suite = started; });

    const stop = async (name: string) => {
      const stopped = await suite.cli(['stop', name, '--abort']);
      expect(stopped.code, show(stopped)).to.equal(0);
      await suite.waitFor(name, (run) => run.status === 'terminated', `${name} to stop`);
    };
    const machines = async () => (await suite.cloudInstances()).filter((m) => m.status !== 'terminated' && m.status !== 'terminating');

    before(async () => {
      await suite.apply('any', 'type: fleet\nname: any\nbackends: [gpucloud]\nnodes: 0..4\nidle_duration: 10m\nresources:\n  gpu: 24GB..\n');
    });

    it('keeps a run under its limit waiting with the reason, in the plan and in the queue, and rents nothing', async () => {
      const plan = await suite.server.api('POST', '/api/projects/main/runs/plan', { spec: { type: 'task', name: 'dear', fleets: ['any'], resources: { gpu: 'H100' }, commands: ['sleep 300'], max_price: 2 } });
      expect(plan.status, JSON.stringify(plan.body)).to.equal(200);
      expect((plan.body as RunPlan).problem).to.equal(`waiting: ${TOO_DEAR}`);
      expect((plan.body as RunPlan).offers).to.deep.equal([]);

      const applied = await suite.apply('dear', task('dear', 'H100', 'max_price: 2\n'));
      expect(`${applied.stdout}${applied.stderr}`).to.include(TOO_DEAR);
      const waiting = await suite.waitFor('dear', (run) => run.statusMessage !== '' && run.statusMessage !== 'submitted', 'dear to get a queue reason');
      expect(waiting.status).to.equal('submitted');
      expect(waiting.statusMessage).to.equal(`waiting: ${TOO_DEAR}`);
      const ps = await suite.cli(['ps']);
      expect(ps.stdout).to.include(TOO_DEAR);
      expect(await machines()).to.deep.equal([]);
      await stop('dear');
    });

    it('passes over an idle instance above the limit and rents a cheaper one', async () => {
      await suite.apply('h100', task('h100', 'H100'));
      const first = await suite.waitFor('h100', (run) => run.status === 'running', 'h100 to run');
      expect(first.pricePerHour).to.equal(2.5);
      await stop('h100');

      await suite.apply('thrifty', task('thrifty', '24GB..', 'max_price: 1\n'));
      const thrifty = await suite.waitFor('thrifty', (run) => run.status === 'running', 'thrifty to run');
      expect(thrifty.instance).to.not.equal(first.instance);
      expect(thrifty.gpu?.name).to.equal('L4');
      expect(thrifty.pricePerHour).to.equal(0.8);
      await stop('thrifty');
    });

    it('holds a fleet\'s max_price for every run on it, and its plan says so', async () => {
      const capped = { type: 'fleet', name: 'capped', backends: ['gpucloud'], nodes: '0..2', resources: { gpu: 'H100' }, max_price: 1 };
      const fleetPlan = await suite.server.api('POST', '/api/projects/main/fleets/plan', { spec: capped });
      expect(fleetPlan.body.problem).to.equal('no offer at or under $1.00/h: the cheapest matching is H100 at $2.50/h');
      const runPlan = await suite.server.api('POST', '/api/projects/main/runs/plan', {
        spec: { type: 'task', fleets: ['capped'], resources: { gpu: 'H100' }, commands: ['sleep 300'], max_price: 5 }, fleets: [capped],
      });
      expect(runPlan.body.problem).to.equal('waiting: no offer at or under $1.00/h: the cheapest matching is H100 at $2.50/h in fleet capped; fleet l4 is not among fleets: [capped]; fleet any is not among fleets: [capped]');
    });

    it('counts a service\'s max_price per replica', async () => {
      await suite.apply('svc', 'type: service\nname: svc\nfleets: [any]\nport: 8000\nreplicas: 2\nmax_price: 1\nauth: false\nresources:\n  gpu: 24GB..\ncommands:\n  - sleep 300\n');
      const replicas = await eventually(async () => {
        const fleets = (await suite.server.api('GET', '/api/projects/main/fleets')).body as Fleet[];
        const taken = fleets.find((f) => f.name === 'any')!.instances.filter((i) => i.run !== null && i.pricePerHour !== null);
        return taken.length === 2 ? taken : null;
      }, 60_000, 'both replicas on instances');
      expect(replicas.map((i) => [i.gpu?.name, i.pricePerHour])).to.deep.equal([['L4', 0.8], ['L4', 0.8]]);
      expect((await machines()).filter((m) => m.price_per_hour > 1).map((m) => m.gpu.model)).to.deep.equal(['H100']);
      const stopped = await suite.cli(['stop', 'svc', '--abort']);
      expect(stopped.code, show(stopped)).to.equal(0);
    });
  });
}
