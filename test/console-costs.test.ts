import { expect } from 'chai';
import { copyFileSync, mkdirSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import type { CostReport } from '../api/costs.js';
import { formatDollars } from '../api/offer.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { launchChromium } from './helpers/chromium.js';
import { builtConsole, signedInPage } from './helpers/console.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

const artifacts = fileURLToPath(new URL('../test-artifacts/console/', import.meta.url));
const DOCS_IMAGE = fileURLToPath(new URL('../docs/images/console-costs.png', import.meta.url));
const WAIT_MS = 20_000;

for (const kind of DATABASE_KINDS) {
  describe(`the console's money in Chromium on ${kind}: cost beside the price, and the Costs page`, function () {
    this.timeout(150_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    let browser: Browser;
    let receiver: Server;
    let receiverUrl: string;
    let memberToken: string;

    const run = async (name: string, seconds: number) => {
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name, fleets: ['gpu'], commands: [`sleep ${seconds}`], resources: { gpu: 'H100:1' } } });
      return eventually(async () => {
        const { body } = await server.api('GET', `/api/projects/main/runs/${name}`);
        return body.status === 'done' ? body : null;
      }, 60_000, `${name} to be done`);
    };

    before(async () => {
      mkdirSync(artifacts, { recursive: true });
      emulator = await startEmulator({ port: 0, bootDelayMs: 100 });
      receiver = createServer((request, response) => { request.resume(); request.on('end', () => response.end('ok')); });
      await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
      receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
      server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey), { consoleDir: await builtConsole() });
      memberToken = (await server.api('POST', '/api/users', { name: 'member' })).body.token;
      expect((await server.api('POST', '/api/projects/main/members', { user: 'member', role: 'user' })).status).to.equal(201);
      await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'gpu', backends: ['gpucloud'], nodes: 1, resources: { gpu: 'H100:1' } } });
      await run('paid', 2);
      browser = await launchChromium();
    });

    after(async () => {
      await browser?.close();
      if (server) {
        await server.api('DELETE', '/api/projects/main/fleets/gpu');
        await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.length === 0, 30_000, 'the instance to go');
        await server.stop();
      }
      receiver?.close();
      await emulator?.close();
    });

    const signedIn = (token: string, path: string) => signedInPage(browser, server, token, path, WAIT_MS);

    /** Waits until the cell's text is the API's figure, formatted (the ledger counts every second here, so both move). */
    async function showsApiCost(page: Page, selector: string, apiCost: () => Promise<number>, what: string): Promise<void> {
      await eventually(async () => (await page.locator(selector).textContent()) === formatDollars(await apiCost()), WAIT_MS, what);
    }

    it('shows each run\'s and each instance\'s cost so far beside its price', async () => {
      const page = await signedIn(server.adminToken, '/projects/main/runs');
      const runCost = async () => (await server.api('GET', '/api/projects/main/runs/paid')).body.cost as number;
      expect(await runCost()).to.be.greaterThan(0);
      await page.locator('tr[data-run="paid"]').waitFor({ timeout: WAIT_MS });
      const headers = await page.locator('table.runs thead th').allTextContents();
      expect(headers.indexOf('Cost')).to.equal(headers.indexOf('Price') + 1);
      await showsApiCost(page, 'tr[data-run="paid"] td.cost', runCost, 'the runs list to show the run\'s cost');
      await page.locator('tr[data-run="paid"] a').click();
      await showsApiCost(page, 'dd.cost', runCost, 'the run page to show its cost');
      const facts = await page.locator('dl.facts dt').allTextContents();
      expect(facts.indexOf('Cost so far')).to.equal(facts.indexOf('Price') + 1);
      await page.locator('header.top nav').getByRole('link', { name: 'Fleets', exact: true }).click();
      const instanceCost = async () => (await server.api('GET', '/api/projects/main/fleets/gpu')).body.instances[0].cost as number;
      await showsApiCost(page, '[data-fleet="gpu"] td.cost', instanceCost, 'the fleets page to show the instance\'s cost');
      await page.context().close();
    });

    it('reports costs by run and by fleet over a window kept in the URL, as the API does', async () => {
      const page = await signedIn(server.adminToken, '/projects/main/runs');
      await page.locator('header.top nav').getByRole('link', { name: 'Costs', exact: true }).click();
      await page.locator('tr[data-cost="paid"]').waitFor({ timeout: WAIT_MS });
      const paid = (await server.api('GET', '/api/projects/main/costs?by=run&since=30d')).body as CostReport;
      expect(await page.locator('tr[data-cost="paid"] td:nth-child(3)').textContent()).to.equal(formatDollars(paid.rows.find((r) => r.name === 'paid')!.dollars));
      await page.getByLabel('By').selectOption('fleet');
      await page.locator('tr[data-cost="gpu"]').waitFor({ timeout: WAIT_MS });
      expect(page.url()).to.equal(`${server.url}/projects/main/costs?by=fleet`);
      await page.getByLabel('Since').selectOption('24h');
      expect(page.url()).to.equal(`${server.url}/projects/main/costs?by=fleet&since=24h`);
      await page.getByLabel('Month', { exact: true }).fill('2020-01');
      await page.getByLabel('Month', { exact: true }).dispatchEvent('change');
      await page.getByText('Nothing spent in this window').waitFor({ timeout: WAIT_MS });
      expect(page.url()).to.equal(`${server.url}/projects/main/costs?by=fleet&month=2020-01`);
      expect(await page.locator('p.total strong').textContent()).to.equal('$0.00');
      await page.context().close();
    });

    it('lets an admin set, refuse and remove the budget with the keyboard, and add a webhook whose secret it shows once, with its deliveries', async () => {
      const page = await signedIn(server.adminToken, '/projects/main/costs');
      await page.getByText('No budget: nothing stops this project\'s spending. Set one below.').waitFor({ timeout: WAIT_MS });
      await page.getByLabel('Dollars').fill('-5');
      await page.getByLabel('Dollars').press('Enter');
      await page.locator('#budget .error').getByText('amount: expected dollars per period').waitFor({ timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/budget')).body.budget).to.equal(null);
      await page.getByLabel('Dollars').fill('1000');
      await page.getByLabel('When spent').selectOption('stop_new');
      await page.getByLabel('Alerts (%)').fill('50, 90');
      await page.getByLabel('Alerts (%)').press('Enter');
      await page.locator('.budget-standing').getByText('of $1000.00 spent this month').waitFor({ timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/budget')).body.budget).to.deep.equal({ amount: 1000, period: 'month', on_exceed: 'stop_new', alerts: [50, 90] });
      expect(await page.locator('#budget dl.facts dd').allTextContents()).to.deep.equal(['stop_new', '50%, 90%', 'the API']);

      await page.getByText('No webhooks yet.').waitFor({ timeout: WAIT_MS });
      await page.getByLabel('URL').fill(receiverUrl);
      await page.getByLabel('Events').fill('run.done');
      await page.getByLabel('Events').press('Enter');
      const secret = await page.locator('[data-secret-shown] pre').textContent({ timeout: WAIT_MS });
      expect(secret).to.match(/^whsec_/);
      await page.locator(`tr[data-webhook="${receiverUrl}"]`).waitFor({ timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/webhooks')).body[0]).to.not.have.property('secret');
      await page.getByRole('button', { name: 'I have kept it' }).click();
      expect(await page.locator('body').textContent()).to.not.include(secret);
      await run('heard', 0);
      await page.getByRole('button', { name: 'Deliveries' }).click();
      await page.locator('tr[data-delivery="run.done"]').getByText('delivered').waitFor({ timeout: WAIT_MS });
      expect(await page.locator('tr[data-delivery="run.done"] td:nth-child(4)').textContent()).to.equal('200');
      await page.getByLabel('By').selectOption('run');
      await page.locator('tr[data-cost="heard"]').waitFor({ timeout: WAIT_MS });
      await page.screenshot({ path: `${artifacts}${kind}-costs.png`, fullPage: true });
      if (kind === DATABASE_KINDS[0]) copyFileSync(`${artifacts}${kind}-costs.png`, DOCS_IMAGE);

      await page.locator(`tr[data-webhook="${receiverUrl}"]`).getByRole('button', { name: 'Delete' }).click();
      await page.getByRole('button', { name: 'Yes, delete' }).click();
      await page.getByText('No webhooks yet.').waitFor({ timeout: WAIT_MS });
      await page.getByRole('button', { name: 'Remove budget' }).click();
      await page.getByRole('button', { name: 'Yes, remove' }).press('Enter');
      await page.getByText('No budget: nothing stops').waitFor({ timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/budget')).body.budget).to.equal(null);
      await page.context().close();
    });

    it('shows a member the budget without controls, and no webhooks', async () => {
      expect((await server.api('PUT', '/api/projects/main/budget', { amount: 50, period: 'week' })).status).to.equal(200);
      const page = await signedIn(memberToken, '/projects/main/costs');
      await page.locator('.budget-standing').getByText('of $50.00 spent this week').waitFor({ timeout: WAIT_MS });
      await page.getByText('Only the project\'s admins see and change its webhooks.').waitFor({ timeout: WAIT_MS });
      expect(await page.getByRole('button', { name: /budget/i }).count()).to.equal(0);
      expect(await page.getByLabel('Dollars').count()).to.equal(0);
      expect(await page.getByRole('button', { name: 'Add webhook' }).count()).to.equal(0);
      await page.context().close();
    });
  });
}
