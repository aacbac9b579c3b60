import { expect } from 'chai';
import { ONE_DATABASE } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';
import { show } from './helpers/cli.js';

function watched(name: string): string {
  return `type: task\nname: ${name}\nresources:\n  gpu: L4\ncommands:\n  - sleep 300\nutilization_policy:\n  min_gpu_utilization: 50\n  time_window: 3s\n`;
}

for (const kind of ONE_DATABASE) {
  describe(`utilization policy (${kind})`, function () {
    this.timeout(90_000);
    let suite: GpucloudSuite;

    useGpucloudSuite(kind, (started) => { suite = started; });

    it('ends a run whose GPUs stay below min_gpu_utilization for time_window with reason gpu_underutilized', async () => {
      expect((await suite.faults({ gpu_utilization: 10 })).status).to.equal(200);
      await suite.apply('idle-gpu', watched('idle-gpu'));
      const running = await suite.waitFor('idle-gpu', (run) => run.status === 'running', 'idle-gpu to run');
      const ended = await suite.waitFor('idle-gpu', (run) => run.status === 'terminated', 'idle-gpu to be stopped');
      expect(ended.terminationReason).to.equal('gpu_underutilized');
      expect(Date.parse(ended.finishedAt!) - Date.parse(running.startedAt!)).to.be.at.least(3000);
      const events = await suite.events('idle-gpu');
      expect(events).to.include('Terminating: every GPU stayed below 50% for utilization_policy.time_window (3s)');
    });

    it('keeps a run whose GPUs are busy enough', async () => {
      expect((await suite.faults({ gpu_utilization: 80 })).status).to.equal(200);
      await suite.apply('busy-gpu', watched('busy-gpu'));
      const running = await suite.waitFor('busy-gpu', (run) => run.status === 'running', 'busy-gpu to run');
      const metrics = await suite.cli(['metrics', 'busy-gpu', '--json']);
      expect(JSON.parse(metrics.stdout).gpus.map((gpu: { utilizationPercent: number }) => gpu.utilizationPercent), show(metrics)).to.deep.equal([80]);
      await new Promise((resolve) => setTimeout(resolve, 5000));
      const still = await suite.run('busy-gpu');
      expect(still!.status).to.equal('running');
      expect(still!.startedAt).to.equal(running.startedAt);
      expect((await suite.cli(['stop', 'busy-gpu', '--abort'])).code).to.equal(0);
    });
  });
}
