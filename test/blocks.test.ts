import { expect } from 'chai';
import type { Fleet } from '../api/objects.js';
import { show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';
import { eventually } from './helpers/server.js';

const SPLIT_FLEET = 'type: fleet\nname: l4-blocks\nbackends: [gpucloud]\nnodes: 0..1\nblocks: 2\nresources:\n  gpu: L4:2\n';

function oneGpuTask(name: string): string {
  return [
    'type: task', `name: ${name}`, 'fleets: [l4-blocks]', 'resources:', '  gpu: L4:1', 'commands:',
    '  - echo "cuda=$CUDA_VISIBLE_DEVICES gpus=$ORCHESTRATOR_GPUS_NUM"', '  - sleep 6', '',
  ].join('\n');
}

for (const kind of DATABASE_KINDS) {
  describe(`blocks: runs share an instance (gpucloud emulator, ${kind})`, function () {
    this.timeout(90_000);
    let suite: GpucloudSuite;
    useGpucloudSuite(kind, (started) => { suite = started; });
    const fleet = async () => (await suite.server.api('GET', '/api/projects/main/fleets/l4-blocks')).body as Fleet;

    it('runs two one-GPU tasks on one two-GPU instance at once, each with its own GPU, and fleet shows the blocks in use', async () => {
      await suite.apply('l4-blocks', SPLIT_FLEET);
      await suite.apply('first', oneGpuTask('first'));
      await suite.apply('second', oneGpuTask('second'));
      const [first, second] = [
        await suite.waitFor('first', (r) => r.status === 'running', 'the first task to run', 60_000),
        await suite.waitFor('second', (r) => r.status === 'running', 'the second task to run', 60_000),
      ];
      expect(first.instance).to.be.a('string').and.equal(second.instance);
      const [instance] = (await fleet()).instances;
      expect(instance).to.deep.include({ gpu: { name: 'L4', memoryMib: 24 * 1024, count: 2 }, status: 'busy', blocks: { busy: 2, total: 2 } });
      const table = await suite.cli(['fleet']);
      expect(table.stdout, show(table)).to.match(/^l4-blocks\s+l4-blocks-0\s+gpucloud\s+L4:24GB:2\s+busy\s.*blocks 2\/2 busy$/m);

      const outputs = [];
      for (const name of ['first', 'second']) {
        await suite.waitFor(name, (r) => r.status === 'done', `${name} to finish`);
        outputs.push((await suite.cli(['logs', name])).stdout);
      }
      expect(outputs.sort()).to.deep.equal(['cuda=0 gpus=1\n', 'cuda=1 gpus=1\n']);
      expect((await suite.cloudInstances()).filter((cloud) => cloud.gpu.model === 'L4' && cloud.status === 'running')).to.have.length(1);
    });

    it('frees the blocks when the runs end: the instance goes idle, and a third task takes a block of it', async () => {
      await eventually(async () => {
        const [instance] = (await fleet()).instances;
        return instance?.status === 'idle' && instance.blocks?.busy === 0;
      }, 30_000, 'the shared instance to be idle with no block in use');
      const before = (await fleet()).instances[0]!.name;
      const applied = await suite.apply('third', oneGpuTask('third'));
      expect(applied.stderr).to.contain(`  instance     ${before} (idle, fleet l4-blocks, block 0 of 2, GPU L4:24GB:1, $1.60/h)\n`);
      const third = await suite.waitFor('third', (r) => r.status === 'running' || r.status === 'done', 'the third task to start');
      expect(third.instance).to.equal(before);
    });

    it('refuses a multi-node task on a fleet split into blocks, saying why it waits', async () => {
      await suite.apply('pair', ['type: task', 'name: pair', 'nodes: 2', 'fleets: [l4-blocks]', 'resources:', '  gpu: L4:1', 'commands: [echo]', ''].join('\n'));
      const pair = await suite.waitFor('pair', (r) => r.statusMessage.includes('blocks'), 'the 2-node task to say why it waits');
      expect(pair.status).to.equal('submitted');
      expect(pair.statusMessage).to.contain('fleet l4-blocks shares its instances in blocks, and the nodes of a multi-node task take whole instances');
      await suite.cli(['stop', 'pair', '-y']);
    });
  });
}
