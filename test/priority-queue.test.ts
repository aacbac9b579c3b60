import { expect } from 'chai';
import { DATABASE_KINDS } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';

function h100Task(name: string, command: string, priority: number): string {
  return `type: task\nname: ${name}\npriority: ${priority}\nresources:\n  gpu: H100\ncommands:\n  - ${command}\n`;
}

for (const kind of DATABASE_KINDS) {
  describe(`priority orders the queue (${kind})`, function () {
    this.timeout(90_000);
    let suite: GpucloudSuite;
    useGpucloudSuite(kind, (started) => { suite = started; });

    it('starts a later run of higher priority before an earlier one of lower priority once capacity frees up', async () => {
      await suite.apply('one-h100', 'type: fleet\nname: one-h100\nbackends: [gpucloud]\nnodes: 0..1\nidle_duration: 1m\nresources:\n  gpu: H100\n');
      await suite.apply('blocker', h100Task('blocker', 'sleep 300', 0));
      await suite.waitFor('blocker', (run) => run.status === 'running', 'blocker to run');
      await suite.apply('low', h100Task('low', 'echo low', 10));
      await suite.apply('high', h100Task('high', 'echo high', 90));
      const ps = await suite.cli(['ps']);
      expect(ps.stdout).to.match(/^high\s+task\s+submitted \(#1\)/m);
      expect(ps.stdout).to.match(/^low\s+task\s+submitted \(#2\)/m);
      expect((await suite.cli(['stop', 'blocker', '--abort'])).code).to.equal(0);
      const low = await suite.waitFor('low', (run) => run.status === 'done', 'low to finish');
      const high = await suite.waitFor('high', (run) => run.status === 'done', 'high to finish');
      expect(Date.parse(high.startedAt!)).to.be.lessThan(Date.parse(low.startedAt!));
      expect(high.instance).to.equal(low.instance);
    });
  });
}
