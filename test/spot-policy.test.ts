import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Fleet } from '../api/objects.js';
import { ONE_DATABASE } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';
import { show } from './helpers/cli.js';
import { eventually } from './helpers/server.js';

function sleeper(name: string, extra: string): string {
  return `type: task\nname: ${name}\nresources:\n  gpu: L4\ncommands:\n  - sleep 300\n${extra}\n`;
}

for (const kind of ONE_DATABASE) {
  describe(`spot policy (${kind})`, function () {
    this.timeout(90_000);
    let suite: GpucloudSuite;

    /** The emulator's machine that runs the run now, with whether it is spot and what it costs. */
    const machineOf = async (name: string) => {
      const run = await suite.waitFor(name, (r) => r.status === 'running', `${name} to run`);
      const fleets = (await suite.server.api('GET', '/api/projects/main/fleets')).body as Fleet[];
      const instance = fleets.flatMap((f) => f.instances).find((i) => i.name === run.instance)!;
      const machine = (await suite.cloudInstances()).find((m) => m.name === instance.name || m.client_token === instance.id);
      expect(machine, `the emulator's machine of ${run.instance}`).to.not.equal(undefined);
      return { run, machine: machine! };
    };

    useGpucloudSuite(kind, (started) => { suite = started; });

    it('offers spot machines at a lower price, and takes them only for spot_policy spot or auto', async () => {
      const offers = JSON.parse((await suite.cli(['offer', '-b', 'gpucloud', '--gpu', 'L4:1', '--json'])).stdout) as { offers: { pricePerHour: number; spot?: boolean; region: string }[] };
      const east = offers.offers.filter((o) => o.region === 'us-east-1');
      expect(east.map((o) => [o.spot, o.pricePerHour])).to.have.deep.members([[false, 0.8], [true, 0.32]]);
      const table = await suite.cli(['offer', '-b', 'gpucloud', '--gpu', 'L4:1']);
      expect(table.stdout).to.match(/^GPU\s+MEMORY\s+COUNT\s+VCPUS\s+RAM\s+DISK\s+REGION\s+\$\/H\s+SPOT\s+AVAILABILITY\n/);
      expect(table.stdout).to.match(/\sus-east-1\s+\$0\.32\s+spot\s/);
      expect(table.stdout).to.match(/\sus-east-1\s+\$0\.80\s+-\s/);

      await suite.apply('on-demand', sleeper('on-demand', ''));
      const onDemand = await machineOf('on-demand');
      expect(onDemand.machine.spot).to.equal(false);
      expect(onDemand.run.pricePerHour).to.equal(0.8);
      await suite.apply('cheap', sleeper('cheap', 'spot_policy: auto'));
      const cheap = await machineOf('cheap');
      expect(cheap.machine.spot).to.equal(true);
      expect(cheap.run.pricePerHour).to.equal(0.32);
      for (const name of ['on-demand', 'cheap']) {
        const stopped = await suite.cli(['stop', name, '--abort']);
        expect(stopped.code, show(stopped)).to.equal(0);
      }
    });

    it('fails an interrupted spot run with reason interrupted, on the emulator\'s schedule', async () => {
      expect((await suite.faults({ spot_interruption_after_ms: 1500 })).status).to.equal(200);
      try {
        await suite.apply('doomed', sleeper('doomed', 'spot_policy: spot'));
        const failed = await suite.waitFor('doomed', (run) => run.status === 'failed', 'doomed to be interrupted');
        expect(failed.terminationReason).to.equal('interrupted');
        expect(failed.statusMessage).to.match(/^spot instance \S+ was interrupted \(interrupted: the cloud took its spot capacity back\)$/);
        expect(failed.attempt).to.equal(1);
      } finally {
        await suite.faults({ spot_interruption_after_ms: null });
      }
    });

    it('resubmits an interrupted run under retry on interruption, on a new spot machine', async () => {
      await suite.apply('phoenix', sleeper('phoenix', 'spot_policy: spot\nretry:\n  on_events: [interruption]\n  duration: 10m'));
      const first = await machineOf('phoenix');
      expect(first.machine.spot).to.equal(true);
      const interrupted = await suite.faults({ interrupt_instances: [first.machine.id] });
      expect(interrupted.status).to.equal(200);
      const second = await suite.waitFor('phoenix', (run) => run.attempt === 2 && run.status === 'running', 'attempt 2 of phoenix to run');
      expect(second.instance).to.not.equal(first.run.instance);
      const events = await suite.events('phoenix');
      expect(events).to.include(`Failed: interrupted: spot instance ${first.run.instance} was interrupted (interrupted: the cloud took its spot capacity back) (attempt 1)`);
      expect(events.some((e) => /^Retrying: attempt 1 failed \(interrupted\); attempt 2 submitted, retry on interruption until /.test(e))).to.equal(true);
      expect((await suite.cli(['stop', 'phoenix', '--abort'])).code).to.equal(0);
      await eventually(async () => (await suite.run('phoenix'))?.status === 'terminated', 20_000, 'phoenix to stop');
    });

    it('refuses to interrupt an on-demand machine', async () => {
      await suite.apply('steady', sleeper('steady', ''));
      const { machine } = await machineOf('steady');
      const refused = await suite.faults({ interrupt_instances: [machine.id] });
      expect(refused.status).to.equal(409);
      expect(await refused.json()).to.deep.equal({ error: { code: 'instance_not_spot', message: `instance ${machine.id} runs on demand; only spot instances are interrupted` } });
      expect((await suite.cli(['stop', 'steady', '--abort'])).code).to.equal(0);
    });

    it('provisions a fleet\'s instances under its spot_policy, as dstack does; a run there must allow spot, its default being on demand', async () => {
      await suite.apply('spot-fleet', 'type: fleet\nname: spot-l4\nbackends: [gpucloud]\nnodes: 1..2\nspot_policy: spot\nresources:\n  gpu: L4\n');
      const kept = await eventually(async () => {
        const fleet = ((await suite.server.api('GET', '/api/projects/main/fleets/spot-l4')).body as Fleet);
        const instance = fleet.instances.find((i) => i.status === 'idle');
        return instance && (await suite.cloudInstances()).find((m) => m.name === instance.name || m.client_token === instance.id);
      }, 60_000, 'the fleet\'s first instance to be idle');
      expect(kept.spot, 'the instance the fleet keeps at its minimum').to.equal(true);

      const file = join(suite.work, 'on-demand-there.yml');
      writeFileSync(file, sleeper('on-demand-there', 'fleets: [spot-l4]'));
      const refused = await suite.cli(['apply', '-f', file, '-y', '-d']);
      expect(refused.code, show(refused)).to.equal(1);
      expect(refused.stderr, 'a run on demand (the default) fits no spot-only fleet').to.contain('no fleet matches: the run needs L4:1; the fleets offer spot-l4 (L4:1.., spot)');

      await suite.apply('spot-there', sleeper('spot-there', 'fleets: [spot-l4]\nspot_policy: auto'));
      const { run, machine } = await machineOf('spot-there');
      expect(machine.spot).to.equal(true);
      expect(run.instance).to.match(/^spot-l4-/);
      expect((await suite.cli(['stop', 'spot-there', '--abort'])).code).to.equal(0);
    });
  });
}
