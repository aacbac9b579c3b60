import { expect } from 'chai';
import { resolve } from 'node:path';
import type { BackendOffersState, OfferListing } from '../api/offer.js';
import type { RunPlan } from '../api/objects.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { addProject, makeHome, runCli, show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

const REPO = resolve(import.meta.dirname, '..');
const GOOD_KEY = 'gc_the-key-in-config';
const FIX = "paste the key the cloud takes now (a gpucloud emulator prints a new one each time it starts) into the server's config.yml and restart the server";
const REFUSED = new RegExp(`^gpucloud: invalid gpucloud API key \\(offers shown are \\d+s old\\); ${FIX.replace(/[()]/g, '\\$&')}$`, 'm');

// The cases run in order: the first lists offers with the right key, the second with a key the cloud no longer takes.
for (const kind of DATABASE_KINDS) {
  describe(`offers of a backend that stops answering (${kind})`, function () {
    this.timeout(90_000);
    let emulator: RunningEmulator;
    let port: number;
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    const cli = (args: string[]) => runCli(args, { home: home.home, cwd: REPO, env: { COLUMNS: '250' } });
    const restartEmulator = async (apiKey: string) => {
      await emulator.close();
      emulator = await startEmulator({ port, apiKey, bootDelayMs: 100 });
    };

    before(async function () {
      this.timeout(60_000);
      emulator = await startEmulator({ port: 0, apiKey: GOOD_KEY, bootDelayMs: 100 });
      port = Number(new URL(emulator.url).port);
      server = await startTestServer(kind, gpucloudConfig(emulator.url, GOOD_KEY));
      home = makeHome();
      await addProject(home.home, server.url);
    });

    after(async function () {
      this.timeout(60_000);
      await server?.stop();
      await emulator?.close();
      home?.remove();
    });

    it('lists fresh offers with the time they were fetched and no errors', async () => {
      const listed = await cli(['offer', '--json']);
      expect(listed.code, show(listed)).to.equal(0);
      const listing = JSON.parse(listed.stdout) as OfferListing;
      expect(listing.errors).to.deep.equal([]);
      expect(listing.backends).to.have.length(1);
      expect(listing.backends[0]).to.include({ backend: 'gpucloud', error: null });
      expect(Date.parse(listing.backends[0]!.fetchedAt!)).to.be.closeTo(Date.now(), 10_000);
      const fleet = await cli(['apply', '-f', 'examples/fleets/gpucloud.yml', '-y']);
      expect(fleet.code, show(fleet)).to.equal(0);
      expect(fleet.stderr).not.to.contain('warning');
      expect(`${fleet.stdout}${fleet.stderr}`).to.match(/… \d+ more; orchestrator offer shows all\n/);
    });

    it('exits 1 for a backend the project does not have, naming the ones it has', async () => {
      const listed = await cli(['offer', '-b', 'aws']);
      expect(listed.code, show(listed)).to.equal(1);
      expect(listed.stderr).to.contain("aws: not configured for this project; configured: gpucloud (see the server's config.yml)");
    });

    it('says in offer, offer --json and the plans that the key is refused and how old the offers shown are, until the key works again', async () => {
      await restartEmulator('gc_a-new-key-after-a-restart');

      const table = await eventually(async () => {
        const result = await cli(['offer', '-b', 'gpucloud']);
        return REFUSED.test(result.stderr) ? result : null;
      }, 20_000, 'offer to report the refused key');
      expect(table.code, show(table)).to.equal(1);
      expect(table.stdout).to.match(/^L4\s+24GB\s+1\s+8\s+32GB\s+200GB\s+us-east-1\s+\$0\.80\s+-\s+available \d+s ago$/m);
      const warnings = table.stderr.trimEnd().split('\n');
      expect(warnings, 'the warning, above and again below the rows').to.have.length(2);
      expect(warnings[1]).to.equal(warnings[0]).and.to.match(REFUSED);

      const json = await cli(['offer', '--json']);
      expect(json.code, show(json)).to.equal(1);
      const listing = JSON.parse(json.stdout) as OfferListing;
      expect(listing.offers.length).to.be.greaterThan(0);
      expect(listing.errors).to.have.length(1);
      expect(listing.errors[0]).to.match(REFUSED);
      const state = listing.backends[0] as BackendOffersState;
      expect(state).to.include({ backend: 'gpucloud', error: 'invalid gpucloud API key' });
      expect(state.ageSeconds).to.be.at.least(3);
      expect(Date.now() - Date.parse(state.fetchedAt!)).to.be.at.least(3000);

      const fleetPlan = await cli(['apply', '-f', 'examples/fleets/gpucloud.yml', '-y']);
      expect(fleetPlan.code, show(fleetPlan)).to.equal(0);
      expect(fleetPlan.stderr).to.match(/^ {2}warning\s+gpucloud: invalid gpucloud API key \(offers shown are \d+s old\); paste the key the cloud takes now /m);

      const runPlan = await server.api('POST', '/api/projects/main/runs/plan', { spec: { type: 'task', name: 'hello', commands: ['echo hi'] } });
      expect(runPlan.status).to.equal(200);
      const plan = runPlan.body as RunPlan;
      expect(plan.offers.length).to.be.greaterThan(0);
      expect(plan.offerErrors).to.have.length(1);
      expect(plan.offerErrors[0]).to.match(REFUSED);

      await restartEmulator(GOOD_KEY);
      const recovered = await eventually(async () => {
        const result = await cli(['offer', '--json']);
        return result.code === 0 ? result : null;
      }, 20_000, 'offer to answer again');
      const fresh = JSON.parse(recovered.stdout) as OfferListing;
      expect(fresh.errors).to.deep.equal([]);
      expect(fresh.backends[0]!.error).to.equal(null);
      expect(fresh.backends[0]!.ageSeconds).to.be.below(5);
    });
  });
}
