import { expect } from 'chai';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { formatSpecError, parseSpecText } from '../api/parse.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { recordCertificateFailure, saveCertificate } from '../store/gateways.js';
import { launchChromium } from './helpers/chromium.js';
import { builtConsole, signedInPage, signInToConsole } from './helpers/console.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, localAndGpucloudConfig, runReaches, startTestServer, type TestServer } from './helpers/server.js';

/** Screenshots of the pages, to look at after a run (gitignored). */
const artifacts = fileURLToPath(new URL('../test-artifacts/console/', import.meta.url));
const WAIT_MS = 20_000;
const SECRET_VALUE = 'hunter2-never-shown';

function config(emulator: RunningEmulator): string {
  return `${localAndGpucloudConfig(emulator.url, emulator.apiKey)}- name: edge
  backends:
  - type: local
    runtime: process
`;
}

for (const kind of DATABASE_KINDS) {
  describe(`the console's offers, events, gateways, fleets, settings, users and apply pages in Chromium on ${kind}`, function () {
    this.timeout(120_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    let browser: Browser;
    let memberToken: string;

    before(async () => {
      mkdirSync(artifacts, { recursive: true });
      emulator = await startEmulator({ port: 0, bootDelayMs: 100 });
      server = await startTestServer(kind, config(emulator), { consoleDir: await builtConsole() });
      expect((await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: 1 } })).status).to.equal(201);
      memberToken = (await server.api('POST', '/api/users', { name: 'member' })).body.token;
      expect((await server.api('POST', '/api/projects/main/members', { user: 'member', role: 'user' })).status).to.equal(201);
      expect((await server.api('PUT', '/api/projects/main/secrets/HF_TOKEN', { value: SECRET_VALUE })).status).to.equal(201);
      browser = await launchChromium();
    });

    after(async () => {
      await browser?.close();
      if (server) {
        for (const run of (await server.api('GET', '/api/projects/main/runs')).body) await server.api('POST', `/api/projects/main/runs/${run.name}/stop`, { abort: true });
        for (const fleet of (await server.api('GET', '/api/projects/main/fleets')).body) await server.api('DELETE', `/api/projects/main/fleets/${fleet.name}`);
        await server.api('DELETE', '/api/projects/main/gateways/edge');
        await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.length === 0, 30_000, 'the instances to go');
        await server.stop();
      }
      await emulator?.close();
    });

    /** Signed in, on `path`: the admin's first project is edge, so pages of main are opened by their URL. */
    async function signedIn(token = server.adminToken, path = '/projects/main/runs'): Promise<Page> {
      return signedInPage(browser, server, token, path, WAIT_MS);
    }

    const screenshot = (page: Page, name: string) => page.screenshot({ path: `${artifacts}${kind}-${name}.png`, fullPage: true });
    const nav = (page: Page, name: string) => page.locator('header.top nav').getByRole('link', { name, exact: true }).click();

    it('lists the offers of every backend, filtered and sorted in the URL', async () => {
      const page = await signedIn();
      await nav(page, 'Offers');
      const rows = page.locator('table.offers tbody tr');
      await page.locator('tr[data-offer="h100-x8-eu-west-1-spot"]').waitFor({ timeout: WAIT_MS });
      const listed = (await server.api('GET', '/api/projects/main/offers')).body.offers.length;
      expect(await rows.count()).to.equal(listed);
      await page.getByLabel('GPU', { exact: true }).selectOption('H100');
      await page.getByLabel('Spot').selectOption('spot');
      await page.getByLabel('Region').selectOption('eu-west-1');
      // Cheapest first until asked otherwise; the sorted column's header says which way, and a click turns it.
      await page.getByRole('button', { name: 'Price ▲' }).click();
      await page.getByRole('button', { name: 'Price ▼' }).waitFor({ timeout: WAIT_MS });
      expect(await rows.count()).to.equal(4);
      expect(await rows.locator('td:nth-child(7)').allTextContents()).to.deep.equal(['$8.00/h', '$4.00/h', '$2.00/h', '$1.00/h']);
      expect(await rows.locator('td:nth-child(3)').allTextContents()).to.deep.equal(['8', '4', '2', '1']);
      expect(page.url()).to.equal(`${server.url}/projects/main/offers?gpu=H100&spot=spot&region=eu-west-1&sort=price&order=desc`);
      await screenshot(page, 'offers');
      await page.getByLabel('Count ≥').fill('4');
      await page.getByLabel('Count ≥').press('Tab');
      await eventually(async () => (await rows.count()) === 2, WAIT_MS, 'the offers of at least 4 GPUs');
      await page.getByLabel('Price ≤ $/h').fill('0.5');
      await page.getByLabel('Price ≤ $/h').press('Tab');
      await page.getByText('No offer matches these filters.').waitFor({ timeout: WAIT_MS });
      await page.context().close();
    });

    it('filters events by kind, object and time through the API, and refuses a filter it cannot read', async () => {
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'evented', commands: ['true'] } });
      await runReaches(server, 'evented', ['done'], WAIT_MS);
      const events = async (query: string) => (await server.api('GET', `/api/projects/main/events?${query}`)).body;
      const kinds = (list: { objectKind: string }[]) => [...new Set(list.map((e) => e.objectKind))];
      expect(kinds(await events('kind=fleet'))).to.deep.equal(['fleet']);
      expect(kinds(await events('kind=run&object=evented'))).to.deep.equal(['run']);
      expect(await events('kind=fleet&object=evented')).to.deep.equal([]);
      const all = await events('');
      const middle = all[Math.floor(all.length / 2)];
      expect((await events(`since=${middle.createdAt}`)).every((e: { createdAt: string }) => e.createdAt >= middle.createdAt)).to.equal(true);
      expect((await events(`until=${middle.createdAt}`)).every((e: { createdAt: string }) => e.createdAt <= middle.createdAt)).to.equal(true);
      expect(await events(`since=${new Date(Date.now() + 3_600_000).toISOString()}`)).to.deep.equal([]);
      expect(await events('limit=2')).to.deep.equal(all.slice(-2));
      for (const [query, message] of [['kind=pod', 'kind: expected'], ['since=yesterday', 'since: expected a date and time'], ['until=2026-13-45T00:00:00Z', 'until: expected'], ['limit=0', 'limit: expected'], ['limit=5000', 'limit: expected']]) {
        const answer = await server.api('GET', `/api/projects/main/events?${query}`);
        expect(answer.status, query).to.equal(400);
        expect(answer.body.error.message, query).to.include(message);
      }
    });

    it('shows the events, filtered by kind, object and time', async () => {
      const page = await signedIn();
      await nav(page, 'Events');
      const table = page.locator('table.events');
      await table.locator('td', { hasText: 'evented' }).first().waitFor({ timeout: WAIT_MS });
      // The page reads the events when the live stream says a new one was recorded, not on a timer: while none is, it asks nothing.
      const reads: string[] = [];
      page.on('request', (request) => { if (new URL(request.url()).pathname === '/api/projects/main/events') reads.push(request.url()); });
      const newest = async () => (await server.api('GET', '/api/projects/main/events?limit=1')).body[0]?.id;
      const quietSince = await newest();
      await page.waitForTimeout(5000);
      if (await newest() === quietSince) expect(reads, 'no read while no event was recorded').to.deep.equal([]);
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'late-event', commands: ['true'] } });
      await table.locator('td', { hasText: 'late-event' }).first().waitFor({ timeout: WAIT_MS });
      await page.getByLabel('Kind').selectOption('fleet');
      await eventually(async () => (await table.locator('tbody td:nth-child(2)').allTextContents()).every((text) => text === 'fleet'), WAIT_MS, 'fleet events only');
      await page.getByLabel('Kind').selectOption('run');
      await page.getByLabel('Object').fill('evented');
      await page.getByLabel('Object').press('Enter');
      await page.getByLabel('Time').selectOption('1h');
      const filteredPath = '/projects/main/events?kind=run&object=evented&within=1h';
      await eventually(async () => {
        const path = await page.evaluate(() => location.pathname + location.search);
        if (path !== filteredPath) throw new Error(`the page is at ${path}`);
        return true;
      }, WAIT_MS, `the filters in the URL, ${filteredPath}`);
      await eventually(async () => {
        const objects = await table.locator('tbody td:nth-child(3)').allTextContents();
        return objects.length > 0 && objects.every((text) => text === 'evented');
      }, WAIT_MS, 'the events of evented only');
      expect(await table.locator('tbody td:nth-child(3) a').first().getAttribute('href')).to.equal('/projects/main/runs/evented');
      await screenshot(page, 'events');
      await page.getByLabel('Object').fill('nothing-here');
      await page.getByLabel('Object').press('Enter');
      await page.getByText('No events match these filters.').waitFor({ timeout: WAIT_MS });
      await page.context().close();
    });

    it("shows a gateway's domain, state and why, and each certificate's expiry or why it failed", async () => {
      // The emulator sells no machine without GPUs, which a gateway rents: it fails, and says why.
      const applied = await server.api('POST', '/api/projects/main/apply', { items: [{ spec: { type: 'gateway', name: 'edge', domain: '*.example.test', backend: 'gpucloud' } }] });
      expect(applied.status).to.equal(201);
      const gateway = applied.body.items[0].gateway;
      await saveCertificate(server.db, gateway.id, 'chat.example.test', 'PEM', 'sealed', new Date(), new Date(Date.now() + 60.5 * 86_400_000));
      await recordCertificateFailure(server.db, gateway.id, 'broken.example.test', 'acme: the DNS name does not resolve');
      const page = await signedIn(server.adminToken, '/projects/main/gateways');
      const row = page.locator('tr[data-gateway="edge"]');
      await row.locator('td').nth(2).locator('.status-failed', { hasText: 'failed' }).waitFor({ timeout: WAIT_MS });
      expect(await row.locator('td').nth(1).textContent()).to.equal('*.example.test');
      await row.getByText('no instance for the gateway: gpucloud sells no available machine without GPUs').waitFor({ timeout: WAIT_MS });
      await row.locator('li', { hasText: 'chat.example.test' }).getByText('expires in 60d').waitFor({ timeout: WAIT_MS });
      await row.locator('li', { hasText: 'broken.example.test' }).getByText('acme: the DNS name does not resolve').waitFor({ timeout: WAIT_MS });
      await screenshot(page, 'gateways');
      await page.goto(`${server.url}/projects/edge/gateways`);
      await page.getByText('No gateways in this project.').waitFor({ timeout: WAIT_MS });
      await page.context().close();
    });

    it('reads the fleets, events and gateways once each when their page opens', async () => {
      // Project edge is quiet: nothing in it changes, so the live stream's versions of its lists stay as first sent.
      const page = await signedIn(server.adminToken, '/projects/edge/runs');
      const reads: string[] = [];
      page.on('request', (request) => { reads.push(new URL(request.url()).pathname); });
      for (const [list, empty] of [['fleets', 'No fleets in this project.'], ['events', 'Nothing has happened in this project yet.'], ['gateways', 'No gateways in this project.']]) {
        await page.goto(`${server.url}/projects/edge/${list}`);
        await page.getByText(empty!).first().waitFor({ timeout: WAIT_MS });
        await page.waitForTimeout(1500);
        expect(reads.filter((path) => path === `/api/projects/edge/${list}`), list).to.have.length(1);
      }
      await page.context().close();
    });

    it('shows each instance with its idle timer and the runs on it, and deletes a fleet after asking', async () => {
      expect((await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'spare', backends: ['gpucloud'], nodes: '0..2', idle_duration: '10m' } })).status).to.equal(201);
      const page = await signedIn();
      await nav(page, 'Fleets');
      const instance = page.locator('[data-fleet="local"] tr[data-instance]');
      await instance.locator('.idle', { hasText: 'idle for' }).waitFor({ timeout: WAIT_MS });
      await instance.getByText('kept: the fleet keeps at least 1').waitFor({ timeout: WAIT_MS });
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'sleeper', commands: ['sleep 120'] } });
      await instance.locator('td.runs-cell').getByRole('link', { name: 'sleeper' }).waitFor({ timeout: WAIT_MS });
      await instance.locator('td.idle-cell', { hasText: '—' }).waitFor({ timeout: WAIT_MS });
      await screenshot(page, 'fleets');
      await server.api('POST', '/api/projects/main/runs/sleeper/stop', { abort: true });

      const spare = page.locator('[data-fleet="spare"]');
      await spare.getByRole('button', { name: 'Delete fleet' }).click();
      await spare.getByText('Delete fleet spare? Its 0 instances are released, and runs on them stop.').waitFor({ timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/fleets/spare')).status, 'nothing is deleted before the answer').to.equal(200);
      await page.keyboard.press('Enter');
      await spare.waitFor({ state: 'detached', timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/fleets/spare')).status).to.equal(404);
      await page.context().close();
    });

    it('lets an admin manage members and secrets, and shows the backends without their credentials', async () => {
      const backends = await server.api('GET', '/api/projects/main/backends', undefined, memberToken);
      expect(backends.status).to.equal(200);
      expect(backends.body).to.deep.equal([
        { type: 'local', settings: { runtime: 'process' }, credentials: null },
        { type: 'gpucloud', settings: { api_url: emulator.url }, credentials: 'api_key' },
      ]);
      expect(JSON.stringify(backends.body)).not.to.include(emulator.apiKey);
      await server.api('POST', '/api/users', { name: 'newcomer' });

      const page = await signedIn(server.adminToken, '/projects/main/settings');
      await page.locator('tr[data-backend="gpucloud"]', { hasText: 'api_key (set, hidden)' }).waitFor({ timeout: WAIT_MS });
      await page.locator('tr[data-secret="HF_TOKEN"]').waitFor({ timeout: WAIT_MS });
      expect(await page.content()).not.to.include(emulator.apiKey);
      expect(await page.content()).not.to.include(SECRET_VALUE);

      const members = page.locator('#members');
      await members.getByLabel('User', { exact: true }).fill('newcomer');
      await members.getByRole('button', { name: 'Add member' }).click();
      await members.locator('tr[data-member="newcomer"]').waitFor({ timeout: WAIT_MS });
      await members.getByLabel('role of newcomer').selectOption('admin');
      await eventually(async () => (await server.api('GET', '/api/projects/main/members')).body.some((m: { user: string; role: string }) => m.user === 'newcomer' && m.role === 'admin'), WAIT_MS, 'newcomer to be an admin');
      await members.getByLabel('User', { exact: true }).fill('nobody-at-all');
      await members.getByRole('button', { name: 'Add member' }).click();
      await members.getByRole('alert').filter({ hasText: 'user nobody-at-all not found' }).waitFor({ timeout: WAIT_MS });

      const secrets = page.locator('#secrets');
      await secrets.getByLabel('Name').fill('WANDB_KEY');
      await secrets.getByLabel('Value').fill('wandb-value-1');
      await secrets.getByRole('button', { name: 'Set secret' }).click();
      await secrets.locator('tr[data-secret="WANDB_KEY"]').waitFor({ timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/secrets/WANDB_KEY')).body.value).to.equal('wandb-value-1');
      await screenshot(page, 'settings-admin');
      await secrets.locator('tr[data-secret="WANDB_KEY"]').getByRole('button', { name: 'Delete' }).click();
      await secrets.getByRole('button', { name: 'Yes, delete' }).click();
      await secrets.locator('tr[data-secret="WANDB_KEY"]').waitFor({ state: 'detached', timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/secrets/WANDB_KEY')).status).to.equal(404);

      await members.locator('tr[data-member="newcomer"]').getByRole('button', { name: 'Remove' }).click();
      await members.getByRole('button', { name: 'Yes, remove' }).click();
      await members.locator('tr[data-member="newcomer"]').waitFor({ state: 'detached', timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/members')).body.map((m: { user: string }) => m.user)).not.to.include('newcomer');
      await page.context().close();
    });

    it('shows a member no admin controls, and the server refuses them those calls with the session and with the token', async () => {
      const page = await signedIn(memberToken, '/projects/main/settings');
      await page.locator('tr[data-member="member"]', { hasText: 'user' }).waitFor({ timeout: WAIT_MS });
      await page.locator('tr[data-secret="HF_TOKEN"]').waitFor({ timeout: WAIT_MS });
      await page.locator('tr[data-backend="gpucloud"]').waitFor({ timeout: WAIT_MS });
      await page.getByText('only the project\'s admins change these settings').waitFor({ timeout: WAIT_MS });
      expect(await page.locator('header.top nav a').allTextContents()).to.deep.equal(['Runs', 'Fleets', 'Models', 'Offers', 'Events', 'Gateways', 'Apply', 'Settings', 'Costs']);
      expect(await page.locator('.settings button, .settings select, .settings input').count(), 'no control that changes settings').to.equal(0);
      await screenshot(page, 'settings-member');
      await page.goto(`${server.url}/users`);
      await page.waitForURL(`${server.url}/projects/main/runs`);
      await page.context().close();

      const session = await signInToConsole(server.url, memberToken);
      const asSession = async (method: string, path: string, body?: unknown) => (await fetch(`${server.url}${path}`, {
        method, headers: { cookie: session.cookie, 'x-csrf-token': session.csrfToken, 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      })).status;
      const asToken = async (method: string, path: string, body?: unknown) => (await server.api(method, path, body, memberToken)).status;
      for (const send of [asSession, asToken]) {
        expect(await send('POST', '/api/projects/main/members', { user: 'member', role: 'admin' })).to.equal(403);
        expect(await send('DELETE', '/api/projects/main/members/admin')).to.equal(403);
        expect(await send('PUT', '/api/projects/main/secrets/HF_TOKEN', { value: 'stolen' })).to.equal(403);
        expect(await send('DELETE', '/api/projects/main/secrets/HF_TOKEN')).to.equal(403);
        expect(await send('GET', '/api/projects/main/secrets/HF_TOKEN')).to.equal(403);
        expect(await send('POST', '/api/users', { name: 'intruder', admin: true })).to.equal(403);
        expect(await send('POST', '/api/users/newcomer/rotate-token')).to.equal(403);
        expect(await send('DELETE', '/api/users/newcomer')).to.equal(403);
      }
      expect((await server.api('GET', '/api/projects/main/members')).body).to.deep.include({ user: 'member', role: 'user' });
      expect((await server.api('GET', '/api/projects/main/secrets/HF_TOKEN')).body.value).to.equal(SECRET_VALUE);
      expect((await server.api('GET', '/api/users')).body.map((u: { name: string }) => u.name)).to.include('newcomer').and.not.include('intruder');
    });

    it('lets a global admin create a user, shows its token once, rotates it and deletes the user', async () => {
      const page = await signedIn();
      await nav(page, 'Users');
      await page.getByLabel('New user').fill('temp-user');
      await page.getByRole('button', { name: 'Create user' }).click();
      const token = (await page.locator('pre[data-token]').textContent({ timeout: WAIT_MS }))!;
      expect((await server.api('GET', '/api/projects', undefined, token)).status, 'the token shown signs in').to.equal(200);
      await screenshot(page, 'users');
      await page.getByRole('button', { name: 'Done, hide it' }).click();
      expect(await page.locator('pre[data-token]').count()).to.equal(0);

      const row = page.locator('tr[data-user="temp-user"]');
      // Escape answers no, and gives the keyboard back to the button.
      await row.getByRole('button', { name: 'Rotate token' }).click();
      await eventually(async () => (await row.getByRole('button', { name: 'Yes, rotate' }).evaluate((button) => button === document.activeElement)), WAIT_MS, 'the focus on Yes, rotate');
      await page.keyboard.press('Escape');
      await eventually(async () => (await row.getByRole('button', { name: 'Rotate token' }).evaluate((button) => button === document.activeElement)), WAIT_MS, 'the focus back on Rotate token');
      expect((await server.api('GET', '/api/projects', undefined, token)).status, 'nothing was rotated').to.equal(200);
      await row.getByRole('button', { name: 'Rotate token' }).click();
      await row.getByRole('button', { name: 'Yes, rotate' }).click();
      const rotated = (await page.locator('pre[data-token]').textContent({ timeout: WAIT_MS }))!;
      expect(rotated).not.to.equal(token);
      expect((await server.api('GET', '/api/projects', undefined, token)).status, 'the old token no longer works').to.equal(401);
      expect((await server.api('GET', '/api/projects', undefined, rotated)).status).to.equal(200);
      expect(await page.locator('tr[data-user="admin"]').getByRole('button', { name: 'Delete' }).count(), 'an admin cannot delete themselves').to.equal(0);
      await row.getByRole('button', { name: 'Delete' }).click();
      await row.getByRole('button', { name: 'Yes, delete' }).click();
      await row.waitFor({ state: 'detached', timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects', undefined, rotated)).status).to.equal(401);
      await page.context().close();
    });

    it('checks YAML as it is typed with the CLI\'s located messages, shows the plan, and applies it', async () => {
      const page = await signedIn();
      await nav(page, 'Apply');
      const editor = page.getByLabel('Configuration (YAML)');
      await page.getByText('Valid: task hello.').waitFor({ timeout: WAIT_MS });
      const wrong = 'type: task\nname: from-browser\ncommands:\n  - echo hi\nresources:\n  gpu: H10\nretry: sometimes\n';
      await editor.fill(wrong);
      const expected = parseSpecText(wrong, 'apply.yml', {}).errors.map(formatSpecError);
      expect(expected.length).to.equal(2);
      expect(expected[0]).to.match(/^apply\.yml:6:8: resources\.gpu: /);
      const shown = page.locator('ul.spec-errors li');
      await eventually(async () => JSON.stringify(await shown.allTextContents()) === JSON.stringify(expected), WAIT_MS, `the messages ${expected.join(' | ')}`);
      expect(await page.getByRole('button', { name: 'Show plan' }).isDisabled()).to.equal(true);
      await screenshot(page, 'apply-error');
      await shown.first().getByRole('button').click();
      expect(await editor.evaluate((area: HTMLTextAreaElement) => area.selectionStart)).to.equal(wrong.indexOf('H10'));

      await editor.fill('type: task\nname: [broken\n');
      await shown.first().filter({ hasText: /^apply\.yml:\d+:\d+: invalid YAML: / }).waitFor({ timeout: WAIT_MS });

      const right = 'type: task\nname: from-browser\ncommands:\n  - echo "applied from the browser"\n';
      await editor.fill(right);
      await page.getByText('Valid: task from-browser.').waitFor({ timeout: WAIT_MS });
      await page.getByRole('button', { name: 'Show plan' }).click();
      const plan = page.locator('.plan[data-plan="from-browser"]');
      await plan.getByRole('heading', { name: 'task from-browser: create' }).waitFor({ timeout: WAIT_MS });
      await plan.getByText('local').first().waitFor({ timeout: WAIT_MS });
      expect((await server.api('GET', '/api/projects/main/runs/from-browser')).status, 'a plan submits nothing').to.equal(404);
      await screenshot(page, 'apply-plan');
      await page.getByRole('button', { name: 'Apply', exact: true }).click();
      await page.locator('.applied').getByRole('link', { name: 'from-browser' }).waitFor({ timeout: WAIT_MS });
      const run = await eventually(async () => {
        const answer = await server.api('GET', '/api/projects/main/runs/from-browser');
        return answer.status === 200 && answer.body.status === 'done' ? answer.body : null;
      }, 60_000, 'the applied task to finish');
      expect(run).to.include({ user: 'admin', kind: 'task' });
      await screenshot(page, 'apply-done');
      await page.locator('.applied').getByRole('link', { name: 'from-browser' }).click();
      await page.waitForURL(`${server.url}/projects/main/runs/from-browser`);
      await page.locator('.logs .line', { hasText: 'applied from the browser' }).waitFor({ timeout: WAIT_MS });
      await page.context().close();
    });
  });
}
