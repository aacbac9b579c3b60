import { expect } from 'chai';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Run } from '../api/objects.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { addProject, endCliSuite, makeHome, runCli, show, type CliResult } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

/** The value of one field of a plan, such as `problem` or `resources`. */
function planField(stderr: string, label: string): string | undefined {
  return new RegExp(`^ {2}${label} +(.*)$`, 'm').exec(stderr)?.[1];
}

const OFFERED = 'H100, H200, L4, RTXPRO6000';

for (const kind of DATABASE_KINDS) {
  describe(`GPU names users write (gpucloud, ${kind})`, function () {
    this.timeout(90_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    let work: string;

    const apply = async (name: string, yaml: string, ...flags: string[]): Promise<CliResult> => {
      const file = join(work, `${name}.yml`);
      writeFileSync(file, yaml);
      return runCli(['apply', '-f', file, '-y', '-d', '--no-ssh-config', ...flags], { home: home.home, cwd: work });
    };

    before(async function () {
      this.timeout(120_000);
      emulator = await startEmulator({ port: 0, bootDelayMs: 200 });
      server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey));
      home = makeHome();
      work = mkdtempSync(join(tmpdir(), 'orch-gpu-names-'));
      await addProject(home.home, server.url);
      const fleet = await apply('any', 'type: fleet\nname: any\nbackends: [gpucloud]\nnodes: 0..1\n');
      expect(fleet.code, show(fleet)).to.equal(0);
    });

    after(async function () {
      this.timeout(60_000);
      await endCliSuite(server, home, work);
      await emulator?.close();
    });

    it('takes A100:80GB:8 as valid, and the fleet\'s plan says no backend offers it and what they offer', async () => {
      const result = await apply('a100', 'type: fleet\nname: a100\nbackends: [gpucloud]\nnodes: 0..1\nresources:\n  gpu: A100:80GB:8\n');
      expect(result.code, show(result)).to.equal(0);
      expect(planField(result.stderr, 'resources')).to.equal('8 A100 GPUs with 80 GB');
      expect(planField(result.stderr, 'problem')).to.equal(`no offer matches A100:80GB:8: no backend offers A100; they offer ${OFFERED}`);
      expect(result.stderr).not.to.match(/did you mean/);
    });

    it('takes MI300X for a run, which then fails, submitted with --queue, saying no backend offers it and what they offer', async () => {
      const result = await apply('amd', 'type: task\nname: amd\ncommands:\n  - "true"\nresources:\n  gpu: MI300X\n', '--queue');
      expect(result.code, show(result)).to.equal(0);
      expect(planField(result.stderr, 'problem')).to.equal(`no offers: no gpucloud offer matches MI300X:1 in fleet any (no backend offers MI300X; they offer ${OFFERED})`);
      const run = await eventually(async () => {
        const current = (await server.api('GET', '/api/projects/main/runs/amd')).body as Run;
        return current.status === 'failed' && current;
      }, 20_000, 'the run to fail');
      expect(run.statusMessage).to.contain(`no backend offers MI300X; they offer ${OFFERED}`);
    });

    it('suggests a model only for a name it does not know, and refuses TPUs and mixed vendors by name', async () => {
      const result = await apply('typos', [
        'type: task', 'name: typo', 'commands: ["true"]', 'resources:', '  gpu: H10:2', '---',
        'type: task', 'name: tpu', 'commands: ["true"]', 'resources:', '  gpu: v5litepod-8', '---',
        'type: task', 'name: mixed', 'commands: ["true"]', 'resources:', '  gpu: amd:H100', '---',
        'type: task', 'name: unknown', 'commands: ["true"]', 'resources:', '  gpu: Voodoo5', '',
      ].join('\n'));
      expect(result.code, show(result)).to.equal(1);
      const lines = result.stderr.split('\n').filter((line) => line.startsWith('typos.yml') || line.includes('.yml:'));
      expect(lines.map((line) => line.replace(/^.*typos\.yml:/, ''))).to.deep.equal([
        '5:8: resources.gpu: unknown GPU model "H10"; did you mean "H100"?',
        '11:8: resources.gpu: Google TPUs are not supported: the backends here (gpucloud, local, kubernetes) offer machines with NVIDIA GPUs or none ("v5litepod-8" is a TPU)',
        '17:8: resources.gpu: H100 is an NVIDIA GPU, not AMD',
        '23:8: resources.gpu: unknown GPU model "Voodoo5"; known models are NVIDIA ones such as H100, A100 or L40S, AMD Instinct such as MI300X, Intel Gaudi and Tenstorrent cards (docs/configuration.md lists them all)',
      ]);
    });

    it('understands dstack\'s other spellings of resources, and refuses ARM CPUs and total_memory by name', async () => {
      const ok = await apply('spellings', 'type: task\nname: spellings\ncommands: ["true"]\nresources:\n  gpu: nvidia:1\n  cpu: x86:8..\n  memory: 32GB..\n  disk:\n    size: 100GB..\n');
      expect(ok.code, show(ok)).to.equal(0);
      expect(planField(ok.stderr, 'resources')).to.equal('1 GPU, 8 or more CPUs, 32 GB or more memory, 100 GB or more disk');
      const maps = await apply('maps', 'type: task\nname: maps\ncommands: ["true"]\nresources:\n  gpu:\n    vendor: nvidia\n    name: [L4]\n    count: {min: 1, max: 2}\n  memory: {min: 16GB}\n');
      expect(maps.code, show(maps)).to.equal(0);
      expect(planField(maps.stderr, 'resources')).to.equal('1 to 2 L4 GPUs, 16 GB or more memory');
      const refused = await apply('refused', 'type: task\nname: arm\ncommands: ["true"]\nresources:\n  cpu: arm:4\n---\ntype: task\nname: total\ncommands: ["true"]\nresources:\n  gpu:\n    name: H100\n    total_memory: 160GB\n');
      expect(refused.code, show(refused)).to.equal(1);
      expect(refused.stderr).to.contain('refused.yml:5:8: resources.cpu: ARM CPUs are not supported: the machines the backends here offer are x86');
      expect(refused.stderr).to.contain('refused.yml:13:5: resources.gpu.total_memory: total_memory is not supported: give the memory of one card (memory) and count');
    });
  });
}
