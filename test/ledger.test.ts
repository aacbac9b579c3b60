import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CostReport } from '../api/costs.js';
import type { Instance } from '../api/objects.js';
import type { UsageList } from '../backends/gpucloud/api.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { CLI_MAIN } from './helpers/cli.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { freePort } from './helpers/ports.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

const H100_PER_SECOND = 2.5 / 3600;
const fleet = (name: string, extra: Record<string, unknown> = {}) => ({
  spec: { type: 'fleet', name, backends: ['gpucloud'], nodes: 1, resources: { gpu: 'H100:1' }, ...extra },
});

async function usage(emulator: RunningEmulator): Promise<UsageList> {
  const response = await fetch(`${emulator.url}/usage`, { headers: { authorization: `Bearer ${emulator.apiKey}` } });
  expect(response.status).to.equal(200);
  return await response.json() as UsageList;
}

type Api = (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>;

/** What the fleet cost this month by `cost --month`: read from the ledger's daily sums (and the hours not yet added to them). */
async function fleetThisMonth(api: Api, fleetName: string): Promise<number | undefined> {
  const { body } = await api('GET', `/api/projects/main/costs?by=fleet&month=${new Date().toISOString().slice(0, 7)}`);
  return (body as CostReport).rows.find((r) => r.name === fleetName)?.dollars;
}

/** The fleet's instances, ended ones too, with their cost so far. */
async function instancesOf(api: Api, fleetName: string): Promise<Instance[]> {
  const { body } = await api('GET', '/api/projects/main/instances?all=true');
  return (body as Instance[]).filter((i) => i.fleet === fleetName);
}

/**
 * Deletes the fleet, waits for its one instance to end, and returns its cost by the ledger and by the emulator's bill, once
 * the ledger has settled it (two reads a second apart agree).
 */
async function endAndCompare(api: Api, emulator: RunningEmulator, fleetName: string): Promise<{ ledger: number; cloud: number; seconds: number }> {
  await api('DELETE', `/api/projects/main/fleets/${fleetName}`);
  const [ended] = await eventually(async () => {
    const instances = await instancesOf(api, fleetName);
    return instances.length === 1 && instances[0]!.status === 'terminated' ? instances : null;
  }, 30_000, `the instance of ${fleetName} to be terminated`);
  let last = -1;
  const ledger = await eventually(async () => {
    const [instance] = await instancesOf(api, fleetName);
    const settled = instance!.cost === last && instance!.cost > 0;
    last = instance!.cost;
    if (!settled) await new Promise((r) => setTimeout(r, 1000));
    return settled ? instance!.cost : null;
  }, 30_000, 'the ledger to settle the instance');
  const bill = (await usage(emulator)).usage.find((u) => u.name === ended!.name);
  expect(bill, `the emulator's bill of ${ended!.name}`).to.not.equal(undefined);
  expect(bill!.ended_at).to.be.a('string');
  return { ledger, cloud: bill!.dollars, seconds: bill!.billed_seconds };
}

for (const kind of DATABASE_KINDS) {
  describe(`the ledger on ${kind}`, function () {
    this.timeout(180_000);
    let emulator: RunningEmulator;
    before(async () => { emulator = await startEmulator({ port: 0, bootDelayMs: 100 }); });
    after(async () => { await emulator.close(); });

    describe('across server crashes', () => {
      let dir: string;
      let databaseUrl: string | undefined;
      let dropDatabase: (() => Promise<void>) | undefined;
      let child: ChildProcess | undefined;
      let port = 0;
      const api: Api = async (method, path, body) => {
        const response = await fetch(`http://127.0.0.1:${port}${path}`, {
          method, headers: { authorization: 'Bearer ledger-admin', 'content-type': 'application/json' }, body: body ? JSON.stringify(body) : undefined,
        });
        return { status: response.status, body: response.status === 204 ? null : await response.json() };
      };

      before(async () => {
        port = await freePort();
        dir = mkdtempSync(join(tmpdir(), 'orch-ledger-'));
        writeFileSync(join(dir, 'config.yml'), gpucloudConfig(emulator.url, emulator.apiKey));
        if (kind === 'postgres') ({ url: databaseUrl, drop: dropDatabase } = await createScratchDatabase());
      });
      after(async () => {
        child?.kill('SIGKILL');
        await dropDatabase?.();
        rmSync(dir, { recursive: true, force: true });
      });

      const startServerProcess = async () => {
        child = spawn(process.execPath, [CLI_MAIN, 'server', '--port', String(port)], {
          env: { ...process.env, ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_SERVER_ADMIN_TOKEN: 'ledger-admin', ORCHESTRATOR_DATABASE_URL: databaseUrl ?? '', ORCHESTRATOR_LOG_LEVEL: 'error' },
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        await new Promise<void>((resolve, reject) => {
          let out = '';
          child!.stdout!.on('data', (d) => { out += d; if (out.includes('Server URL')) resolve(); });
          child!.once('exit', (code) => reject(new Error(`server exited with ${code}`)));
        });
      };
      const kill = async () => {
        const exited = new Promise((resolve) => child!.once('exit', resolve));
        child!.kill('SIGKILL');
        await exited;
      };

      it('counts an H100 living N seconds as N × $2.50/3600, within one second\'s price of the emulator\'s bill, through 5 SIGKILLs', async () => {
        await startServerProcess();
        expect((await api('POST', '/api/projects/main/fleets/apply', fleet('crashes'))).status).to.be.oneOf([200, 201]);
        await eventually(async () => (await instancesOf(api, 'crashes')).find((i) => i.status === 'idle'), 30_000, 'the instance to be up');
        for (let kill_ = 0; kill_ < 5; kill_++) {
          // Killed at a different point of the 15 s accrual period each time, down for a moment, then started again.
          await new Promise((r) => setTimeout(r, 700 + kill_ * 900));
          await kill();
          await new Promise((r) => setTimeout(r, 300));
          await startServerProcess();
        }
        const { ledger, cloud, seconds } = await endAndCompare(api, emulator, 'crashes');
        expect(seconds).to.be.greaterThan(8);
        expect(Math.abs(ledger - cloud), `ledger $${ledger} vs the emulator's $${cloud} for ${seconds}s`).to.be.lessThan(H100_PER_SECOND);
        expect(Math.abs(ledger - seconds * H100_PER_SECOND)).to.be.lessThan(H100_PER_SECOND);
        const report = (await api('GET', '/api/projects/main/costs?by=fleet&since=1d')).body as CostReport;
        expect(report.rows.find((r) => r.name === 'crashes')!.dollars).to.be.closeTo(ledger, 1e-9);
        expect(await fleetThisMonth(api, 'crashes')).to.be.closeTo(ledger, 1e-9);
      });
    });

    if (kind === 'postgres') {
      describe('with two servers on one database', () => {
        let first: TestServer;
        let second: TestServer;
        before(async () => {
          first = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey), { ledgerIntervalMs: 50 });
          second = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey), { databaseUrl: first.databaseUrl, ledgerIntervalMs: 50 });
        });
        after(async () => {
          await second.stop();
          await first.stop();
        });

        it('never counts a second twice, though both count every 50 ms', async () => {
          await first.api('POST', '/api/projects/main/fleets/apply', fleet('shared-db'));
          await eventually(async () => (await instancesOf(first.api, 'shared-db')).find((i) => i.status === 'idle'), 30_000, 'the instance to be up');
          await new Promise((r) => setTimeout(r, 5000));
          const { ledger, cloud, seconds } = await endAndCompare(second.api, emulator, 'shared-db');
          expect(seconds).to.be.greaterThan(5);
          expect(Math.abs(ledger - cloud), `ledger $${ledger} vs the emulator's $${cloud} for ${seconds}s`).to.be.lessThan(H100_PER_SECOND);
          // Both servers add finished hours to their days after each count: the month's report still has each second once.
          expect(await fleetThisMonth(first.api, 'shared-db')).to.be.closeTo(ledger, 1e-9);
        });
      });
    }

    describe('a run on part of an instance', () => {
      let server: TestServer;
      // The ledger's periodic count (every 15 s) is longer than the run: the run's share comes from the count made when it
      // took the instance and when it gave it back.
      before(async () => { server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey), { ledgerIntervalMs: 15_000 }); });
      after(async () => { await server.stop(); });

      it('is charged its GPU share of the instance while it holds it, and the rest goes to the fleet', async () => {
        await server.api('POST', '/api/projects/main/fleets/apply', fleet('pair', { resources: { gpu: 'H100:2' } }));
        await eventually(async () => (await instancesOf(server.api, 'pair')).find((i) => i.status === 'idle'), 30_000, 'the instance to be up');
        await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'half', commands: ['sleep 4'], resources: { gpu: 'H100:1..' } } });
        const run = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/runs/half');
          return body.status === 'done' ? body : null;
        }, 30_000, 'the run to be done');
        const metric = async (name: string) => {
          const text = await (await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${server.adminToken}` } })).text();
          return Number(new RegExp(`^${name}\\{project="main",backend="gpucloud"\\} (\\S+)$`, 'm').exec(text)?.[1]);
        };
        expect(await metric('orchestrator_price_per_hour_dollars')).to.equal(5);
        const { ledger } = await endAndCompare(server.api, emulator, 'pair');
        expect(await metric('orchestrator_price_per_hour_dollars')).to.equal(0);
        expect(await metric('orchestrator_spent_dollars_total')).to.be.closeTo(ledger, 1e-9);
        const held = (Date.parse(run.finishedAt) - Date.parse(run.startedAt)) / 1000;
        const perSecond = 2 * H100_PER_SECOND;
        const report = (await server.api('GET', '/api/projects/main/costs?by=run&since=1d')).body as CostReport;
        const half = report.rows.find((r) => r.name === 'half')!;
        // Half of the two-GPU instance from when it took the run to when it gave it back, a moment either side of the job.
        expect(half.dollars).to.be.within(0.5 * perSecond * (held - 0.5), 0.5 * perSecond * (held + 1.5));
        expect(half.seconds).to.be.within(0.5 * (held - 0.5), 0.5 * (held + 1.5));
        expect(report.total).to.be.closeTo(ledger, 1e-9);
        expect(report.rows.find((r) => r.name === '-')!.dollars).to.be.closeTo(ledger - half.dollars, 1e-9);
        const { body: listed } = await server.api('GET', '/api/projects/main/runs?all=true');
        expect(listed.find((r: { name: string }) => r.name === 'half').cost).to.be.closeTo(half.dollars, 1e-9);
      });
    });

    describe('runs holding blocks of a shared instance', () => {
      let server: TestServer;
      before(async () => { server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey), { ledgerIntervalMs: 15_000 }); });
      after(async () => { await server.stop(); });

      it('charges each run its blocks\' share while it holds them and the fleet the rest, summing to the emulator\'s bill', async () => {
        await server.api('POST', '/api/projects/main/fleets/apply', fleet('split', { resources: { gpu: 'H100:2' }, blocks: 2 }));
        await eventually(async () => (await instancesOf(server.api, 'split')).find((i) => i.status === 'idle'), 30_000, 'the instance to be up');
        const task = (name: string, seconds: number) => ({
          spec: { type: 'task', name, fleets: ['split'], commands: [`sleep ${seconds}`], resources: { gpu: 'H100:1' } },
        });
        await server.api('POST', '/api/projects/main/runs/apply', task('short', 3));
        await server.api('POST', '/api/projects/main/runs/apply', task('long', 6));
        const runs = await eventually(async () => {
          const { body } = await server.api('GET', '/api/projects/main/runs?all=true');
          const ended = (body as { name: string; status: string }[]).filter((r) => ['short', 'long'].includes(r.name) && r.status === 'done');
          return ended.length === 2 ? ended as unknown as { name: string; instance: string; startedAt: string; finishedAt: string; cost: number }[] : null;
        }, 60_000, 'both runs to be done');
        expect(runs[0]!.instance).to.equal(runs[1]!.instance);
        const { ledger, cloud } = await endAndCompare(server.api, emulator, 'split');
        const perSecond = 2 * H100_PER_SECOND;
        expect(ledger).to.be.closeTo(cloud, perSecond);
        const report = (await server.api('GET', '/api/projects/main/costs?by=run&since=1d')).body as CostReport;
        const charged = (name: string) => report.rows.find((r) => r.name === name)?.dollars ?? 0;
        for (const run of runs) {
          const held = (Date.parse(run.finishedAt) - Date.parse(run.startedAt)) / 1000;
          // One block of two from when the run took it to when it gave it back, a moment either side of the job.
          expect(charged(run.name), run.name).to.be.within(0.5 * perSecond * (held - 0.5), 0.5 * perSecond * (held + 1.5));
          expect(run.cost, run.name).to.be.closeTo(charged(run.name), 1e-9);
        }
        const fleetRest = charged('-');
        expect(fleetRest).to.be.greaterThan(0);
        expect(charged('short') + charged('long') + fleetRest).to.be.closeTo(ledger, 1e-9);
        expect(report.total).to.be.closeTo(ledger, 1e-9);
      });
    });
  });
}
