import { expect } from 'chai';
import { rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Fleet } from '../api/objects.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { addProject, makeHome, releaseInstances, runCli, show, startCli } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';
import { runCliInTerminal } from './helpers/terminal-cli.js';

const REPO = resolve(import.meta.dirname, '..');

// The cases run in order: the fleet that the second one creates is deleted by the third.
for (const kind of DATABASE_KINDS) {
  describe(`orchestrator CLI on the gpucloud backend (${kind})`, function () {
    this.timeout(90_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    const cli = (args: string[]) => runCli(args, { home: home.home, cwd: REPO });

    before(async function () {
      this.timeout(120_000);
      emulator = await startEmulator({ port: 0, bootDelayMs: 200 });
      server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey));
      home = makeHome();
      await addProject(home.home, server.url);
    });

    after(async function () {
      this.timeout(60_000);
      if (server) {
        await releaseInstances(server).catch(() => undefined);
        await server.stop();
      }
      await emulator?.close();
      home?.remove();
    });

    it('lists the cloud\'s GPUs with their prices, filtered by a GPU spec', async () => {
      const all = await cli(['offer', '-b', 'gpucloud']);
      expect(all.code, show(all)).to.equal(0);
      const header = all.stdout.split('\n')[0]!;
      expect(header.split(/\s+/)).to.deep.equal(['GPU', 'MEMORY', 'COUNT', 'VCPUS', 'RAM', 'DISK', 'REGION', '$/H', 'SPOT', 'AVAILABILITY']);
      expect(all.stdout).to.match(/^L4\s+24GB\s+1\s+8\s+32GB\s+200GB\s+us-east-1\s+\$0\.80\s+-\s+available$/m);
      expect(all.stdout).to.match(/^H100\s+80GB\s+8\s+/m);
      const prices = all.stdout.trimEnd().split('\n').slice(1).map((line) => line.split(/\s+/)[7]);
      expect(prices.filter((price) => !/^\$\d+\.\d\d$/.test(price!)), 'prices not in dollars and cents').to.deep.equal([]);

      const filtered = await cli(['offer', '-b', 'gpucloud', '--gpu', 'H100:2', '--json']);
      const { offers } = JSON.parse(filtered.stdout) as { offers: { gpu: { name: string; count: number } }[] };
      expect(offers.length).to.be.greaterThan(0);
      expect(offers.every((o) => o.gpu.name === 'H100' && o.gpu.count === 2)).to.equal(true);
    });

    it('provisions an instance for hello, shows its GPU count in the logs, and leaves it idle', async () => {
      const fleet = await cli(['apply', '-f', 'examples/fleets/gpucloud.yml', '-y']);
      expect(fleet.code, show(fleet)).to.equal(0);
      expect(fleet.stderr).to.contain('fleet gpucloud: create');
      expect(fleet.stderr).to.match(/^\s+gpucloud\s+L4:24GB:1\s+8\s+32GB\s+200GB\s+\S+\s+\$0\.80/m);
      expect(fleet.stderr).to.contain('\n  resources    1 or more GPUs with 24 GB or more\n');

      const hello = await cli(['apply', '-f', 'examples/tasks/hello.yml', '-y']);
      expect(hello.code, show(hello)).to.equal(0);
      expect(hello.stderr).to.match(/^provisioning: /m);
      expect(hello.stdout).to.contain('Hello from ');

      const listed = await cli(['fleet', '--json']);
      const [gpucloud] = JSON.parse(listed.stdout) as Fleet[];
      expect(gpucloud!.instances).to.have.length(1);
      const instance = gpucloud!.instances[0]!;
      expect(instance.gpu?.name).to.equal('L4');
      expect(hello.stdout).to.contain(`GPUs on this machine: ${instance.gpu!.count}\n`);

      const table = await cli(['fleet']);
      expect(table.stdout).to.match(new RegExp(`^gpucloud\\s+${instance.name}\\s+gpucloud\\s+L4:24GB:1\\s+idle\\s+\\$0\\.80\\s+\\$0\\.0\\d+\\s+-$`, 'm'));
      const ps = await cli(['ps', '-a']);
      expect(ps.stdout).to.match(/^hello\s+task\s+done\s+L4:24GB:1\s+\$0\.80\s+\$0\.0\d+\s+\d+s ago/m);
    });

    it('shows a running task\'s CPU, memory and GPU use, and refuses once it has stopped', async () => {
      const runStatus = async (all: boolean) => (JSON.parse((await cli(['ps', ...(all ? ['-a'] : []), '--json'])).stdout) as { name: string; status: string }[])
        .find((r) => r.name === 'sleeper')?.status;
      const submitted = await cli(['apply', '-f', 'test/fixtures/sleeper.yml', '-y', '-d']);
      expect(submitted.code, show(submitted)).to.equal(0);
      await eventually(async () => (await runStatus(false)) === 'running', 30_000, 'sleeper running');
      const table = await cli(['metrics', 'sleeper']);
      expect(table.code, show(table)).to.equal(0);
      expect(table.stdout).to.match(/^CPU\s+MEMORY/im);
      expect(table.stdout).to.match(/^0\s+L4\s+0%\s+/m);
      const json = JSON.parse((await cli(['metrics', 'sleeper', '--json'])).stdout) as { memoryTotalMib: number; gpus: { name: string }[] };
      expect(json.memoryTotalMib).to.be.greaterThan(0);
      expect(json.gpus.map((g) => g.name)).to.deep.equal(['L4']);
      expect((await cli(['stop', 'sleeper'])).code).to.equal(0);
      await eventually(async () => (await runStatus(true)) === 'terminated', 30_000, 'sleeper stopped');
      const refused = await cli(['metrics', 'sleeper']);
      expect(refused.code).to.equal(1);
      expect(refused.stderr).to.match(/^error: run sleeper is terminated; metrics exist only while it runs$/m);
    });

    it('asks before deleting a fleet, naming the instances it terminates only when it has some', async () => {
      const file = join(tmpdir(), `empty-fleet-${kind}.yml`);
      writeFileSync(file, 'type: fleet\nname: empty\nbackends: [gpucloud]\nnodes: 0..1\n');
      expect((await cli(['apply', '-f', file, '-y'])).code).to.equal(0);
      rmSync(file);
      const deleted = await runCliInTerminal(['fleet', 'delete', 'empty'], { home: home.home, cwd: REPO }, [[/\? /, 'y']]);
      expect(deleted.code, deleted.screen).to.equal(0);
      expect(deleted.screen).to.match(/^Delete fleet empty\? It has no instances\. /m);
      expect(deleted.screen).to.match(/^fleet empty is being deleted\n$/m);
      const kept = await runCliInTerminal(['fleet', 'delete', 'gpucloud'], { home: home.home, cwd: REPO }, [[/\? /, 'n']]);
      expect(kept.screen).to.contain('Delete fleet gpucloud and terminate its 1 instance? [y/N] ');
      expect(kept.screen).to.match(/^fleet gpucloud kept\n/m);
    });

    it('deletes the fleet, releasing its instance, and tells the instance\'s story in events', async () => {
      const [fleet] = JSON.parse((await cli(['fleet', '--json'])).stdout) as Fleet[];
      const instance = fleet!.instances[0]!.name;
      const deleted = await cli(['fleet', 'delete', 'gpucloud', '-y']);
      expect(deleted.code, show(deleted)).to.equal(0);
      expect(deleted.stdout).to.contain('fleet gpucloud is being deleted');
      await eventually(async () => {
        const all = JSON.parse((await cli(['fleet', '-a', '--json'])).stdout) as Fleet[];
        return all.find((f) => f.name === 'gpucloud')?.status === 'terminated';
      }, 30_000, 'the fleet to be terminated');
      const events = await cli(['events', '--object', instance]);
      expect(events.code, show(events)).to.equal(0);
      const reasons = events.stdout.trimEnd().split('\n').slice(1).map((line) => line.split(/\s{2,}/)[2]);
      expect(reasons).to.include.members(['Created', 'Ready', 'Terminated']);
      expect(events.stdout).to.match(new RegExp(`^\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\s+instance/${instance}\\s+Created`, 'm'));

      const followed = startCli(['events', '-f', '--object', instance], { home: home.home, cwd: REPO });
      await followed.waitFor(/Terminated/);
      const [header, first] = (await followed.interrupt()).stdout.split('\n');
      expect(header).to.match(/^TIME {17}OBJECT {20}REASON {8}MESSAGE$/);
      expect(first!.indexOf(`instance/${instance}`), 'the object under its heading').to.equal(header!.indexOf('OBJECT'));
    });
  });
}
