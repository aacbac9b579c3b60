import { expect } from 'chai';
import { mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from './helpers/chromium.js';
import { builtConsole, endConsoleSuite, openSignInForm, signedInPage } from './helpers/console.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';
import { echoLlm } from './helpers/services.js';

/** Screenshots of the main pages, to look at after a run (gitignored). */
const artifacts = fileURLToPath(new URL('../test-artifacts/console/', import.meta.url));
const HOSTILE_LINE = '<img src=x onerror=alert(1)>';
const WAIT_MS = 20_000;
/** More runs than the live list held before it was virtualised (500). */
const OLD_RUNS = 600;

for (const kind of DATABASE_KINDS) {
  describe(`the web console in Chromium on ${kind}`, function () {
    this.timeout(120_000);
    let server: TestServer;
    let browser: Browser;
    let memberToken: string;
    const dialogs: string[] = [];

    before(async () => {
      mkdirSync(artifacts, { recursive: true });
      server = await startTestServer(kind, LOCAL_CONFIG, { consoleDir: await builtConsole() });
      await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } });
      memberToken = (await server.api('POST', '/api/users', { name: 'member' })).body.token;
      expect((await server.api('POST', '/api/projects/main/members', { user: 'member', role: 'user' })).status).to.be.lessThan(300);
      browser = await launchChromium();
    });

    after(() => endConsoleSuite(browser, server));

    afterEach(() => {
      expect(dialogs, 'no script from run or user data may run').to.deep.equal([]);
    });

    async function openPage(colorScheme: 'light' | 'dark' = 'light'): Promise<Page> {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme });
      const page = await context.newPage();
      page.on('dialog', (dialog) => {
        dialogs.push(dialog.message());
        void dialog.dismiss();
      });
      await openSignInForm(page, server.url, WAIT_MS);
      return page;
    }

    async function signIn(page: Page, token: string): Promise<void> {
      await page.locator('#token').fill(token);
      await page.getByRole('button', { name: 'Sign in' }).click();
    }

    const screenshot = (page: Page, name: string) => page.screenshot({ path: `${artifacts}${kind}-${name}.png`, fullPage: true });

    it('signs in with a token, refuses a wrong one with a message, keeps the token out of the URL and storage, asks again when the session expires, and signs out', async () => {
      const page = await openPage();
      await signIn(page, 'a-wrong-token');
      await page.getByRole('alert').filter({ hasText: 'this token is not valid' }).waitFor({ timeout: WAIT_MS });
      await screenshot(page, 'sign-in-refused');
      await signIn(page, server.adminToken);
      await page.getByText('No runs in this project yet.').waitFor({ timeout: WAIT_MS });
      expect(page.url()).to.equal(`${server.url}/projects/main/runs`);
      expect(page.url()).not.to.include(server.adminToken);
      const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie);
      expect(stored).not.to.include(server.adminToken);
      expect(stored, 'the session cookie is httpOnly').not.to.include('orchestrator_session');
      const [cookie] = await page.context().cookies();
      expect(cookie).to.include({ name: 'orchestrator_session', httpOnly: true, sameSite: 'Strict' });
      await screenshot(page, 'runs-empty');

      await page.reload();
      await page.getByText('No runs in this project yet.').waitFor({ timeout: WAIT_MS });
      // A session that expires while the console is open sends it back to the sign-in, saying why.
      await server.db.query(`UPDATE console_sessions SET expires_at = now() - interval '1 second'`);
      await page.locator('header.top nav').getByRole('link', { name: 'Fleets' }).click();
      await page.getByText('Your session has ended (it expired or was signed out). Sign in again.').waitFor({ timeout: WAIT_MS });
      await signIn(page, server.adminToken);
      await page.getByRole('heading', { name: 'Fleets' }).waitFor({ timeout: WAIT_MS });
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByText('Signed out.').waitFor({ timeout: WAIT_MS });
      await page.reload();
      await page.locator('#token').waitFor({ timeout: WAIT_MS });
      await page.context().close();
    });

    it('shows a task applied through the API without a reload, follows its logs as text, and stops it after asking', async () => {
      const page = await openPage();
      await signIn(page, server.adminToken);
      await page.getByText('No runs in this project yet.').waitFor({ timeout: WAIT_MS });
      await page.evaluate(() => { (window as unknown as { loadedOnce: boolean }).loadedOnce = true; });

      const commands = [`echo '${HOSTILE_LINE}'`, 'for i in $(seq 1 3000); do echo "tick $i"; sleep 0.1; done'];
      expect((await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'console-task', commands } })).status).to.equal(201);
      const row = page.locator('tr[data-run="console-task"]');
      await row.locator('.status-running').waitFor({ timeout: WAIT_MS });
      expect(await row.locator('td').nth(2).textContent()).to.equal('task');
      expect(await row.locator('td').nth(8).textContent()).to.equal('admin');
      expect(await row.locator('time').getAttribute('title')).to.match(/\d{4}/);
      expect(await page.evaluate(() => (window as unknown as { loadedOnce?: boolean }).loadedOnce), 'the page was not reloaded').to.equal(true);
      // The fleet holds one instance, which the task has: a second task waits in the queue, and says so.
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'queued-task', commands: ['true'] } });
      await page.locator('tr[data-run="queued-task"] .queue', { hasText: '#1 in queue' }).waitFor({ timeout: WAIT_MS });
      await screenshot(page, 'runs-list');
      await server.api('POST', '/api/projects/main/runs/queued-task/stop', { abort: true });
      await page.locator('tr[data-run="queued-task"] .status-terminated').waitFor({ timeout: WAIT_MS });
      await page.getByLabel('Kind').selectOption('service');
      await page.getByText('No runs match these filters.').waitFor({ timeout: WAIT_MS });
      expect(page.url()).to.equal(`${server.url}/projects/main/runs?kind=service`);
      await page.getByLabel('Kind').selectOption('task');
      await page.getByLabel('Status').selectOption('running');
      await page.getByLabel('User').selectOption('admin');
      await row.waitFor({ timeout: WAIT_MS });
      expect(page.url()).to.equal(`${server.url}/projects/main/runs?kind=task&status=running&user=admin`);

      await row.getByRole('link', { name: 'console-task' }).click();
      await page.waitForURL(`${server.url}/projects/main/runs/console-task`);
      const logs = page.locator('.logs');
      await logs.locator('.line', { hasText: HOSTILE_LINE }).waitFor({ timeout: WAIT_MS });
      expect(await logs.locator('img').count(), 'a log line is never HTML').to.equal(0);
      await page.getByText('orchestrator ssh console-task').waitFor({ timeout: WAIT_MS });
      // Lines the job prints after the page has opened arrive on their own.
      const shown = async () => Number(/tick (\d+)/.exec((await logs.locator('.line', { hasText: 'tick' }).last().textContent()) ?? '')?.[1] ?? 0);
      const first = await eventually(shown, WAIT_MS, 'a first tick');
      await eventually(async () => (await shown()) >= first + 10, WAIT_MS, 'ten more ticks to follow');
      await screenshot(page, 'run-page');

      await page.locator('section.run .toolbar').getByRole('button', { name: 'Stop' }).click();
      await page.getByText('Stop console-task?').waitFor({ timeout: WAIT_MS });
      await page.getByRole('button', { name: 'Yes, stop' }).click();
      await page.locator('dl.facts .status', { hasText: 'terminated' }).waitFor({ timeout: 30_000 });
      expect((await server.api('GET', '/api/projects/main/runs/console-task')).body).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
      await page.getByText('end of logs').waitFor({ timeout: WAIT_MS });
      await page.locator('.events td', { hasText: 'Stopping' }).first().waitFor({ timeout: WAIT_MS });
      await screenshot(page, 'run-stopped');
      await page.context().close();
    });

    it("shows a service's URLs and its replicas as they become ready", async () => {
      expect((await server.api('POST', '/api/projects/main/runs/apply', echoLlm({ replicas: 1, scaling: undefined }))).status).to.equal(201);
      const page = await openPage();
      await signIn(page, server.adminToken);
      await page.locator('tr[data-run="echo-llm"]').getByRole('link', { name: 'echo-llm' }).click();
      const replica = page.locator('.service tr', { hasText: 'echo-llm-0' });
      await replica.locator('td.replica-state', { hasText: 'ready' }).waitFor({ timeout: 60_000 });
      await page.locator('.service code', { hasText: `${server.url}/proxy/services/main/echo-llm/` }).waitFor({ timeout: WAIT_MS });
      await page.locator('.service code', { hasText: `${server.url}/proxy/models/main/` }).waitFor({ timeout: WAIT_MS });
      await screenshot(page, 'service-page');
      await server.api('POST', '/api/projects/main/runs/echo-llm/stop', { abort: true });
      await page.context().close();
    });

    it('shows a member no admin controls, which the server refuses them anyway, and an admin the users page', async () => {
      const member = await openPage();
      await signIn(member, memberToken);
      await member.locator('header.top nav').getByRole('link', { name: 'Runs' }).waitFor({ timeout: WAIT_MS });
      expect(await member.locator('header.top nav a').allTextContents()).to.deep.equal(['Runs', 'Fleets', 'Models', 'Offers', 'Events', 'Gateways', 'Apply', 'Settings', 'Costs']);
      await member.goto(`${server.url}/users`);
      await member.waitForURL(`${server.url}/projects/main/runs`);
      expect(await member.getByRole('heading', { name: 'Users' }).count()).to.equal(0);
      const refused = await member.evaluate(async () => (await fetch('/api/users')).status);
      expect(refused).to.equal(403);
      await member.goto(`${server.url}/projects/nowhere/runs`);
      await member.getByRole('alert').filter({ hasText: 'project nowhere not found' }).waitFor({ timeout: WAIT_MS });
      await member.context().close();

      const admin = await openPage('dark');
      await signIn(admin, server.adminToken);
      await admin.locator('header.top nav').getByRole('link', { name: 'Users' }).click();
      await admin.locator('td', { hasText: 'member' }).waitFor({ timeout: WAIT_MS });
      await screenshot(admin, 'users-dark');
      await admin.locator('header.top nav').getByRole('link', { name: 'Fleets' }).click();
      await admin.locator('[data-fleet="local"]').waitFor({ timeout: WAIT_MS });
      await screenshot(admin, 'fleets-dark');
      await admin.context().close();
    });

    it('keeps a long runs list live row by row: a run changes in place, a new one appears, one that leaves the filter or is deleted goes, and the oldest is reached by scrolling', async () => {
      expect((await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'template', commands: ['true'] } })).status).to.equal(201);
      await eventually(async () => (await server.api('GET', '/api/projects/main/runs/template')).body.finishedAt !== null, 60_000, 'template to end');
      // Finished copies, each older than the one before, as 600 runs of the past would leave them.
      await server.db.query(
        `INSERT INTO runs SELECT (jsonb_populate_record(null::runs, to_jsonb(r) || jsonb_build_object(
           'id', r.id || '-' || g, 'name', 'old-' || g, 'submitted_at', r.submitted_at - g * interval '1 second'))).*
         FROM runs r, generate_series(1, $1) g WHERE r.name = 'template' AND NOT r.deleted`, [OLD_RUNS]);
      try {
        const page = await signedInPage(browser, server, server.adminToken, '/projects/main/runs', WAIT_MS);
        await page.locator('tr[data-run="template"]').waitFor({ timeout: WAIT_MS });
        const listed = Number(await page.locator('table.runs').getAttribute('data-count'));
        expect(listed).to.be.greaterThan(OLD_RUNS);
        expect(await page.locator('tr[data-run]').count(), 'only the rows in view are drawn').to.be.lessThan(100);
        await page.evaluate(() => { (window as unknown as { loadedOnce: boolean }).loadedOnce = true; });

        await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'row-task', commands: ['sleep 600'] } });
        const row = page.locator('tr[data-run="row-task"]');
        await row.waitFor({ timeout: WAIT_MS });
        await row.evaluate((element) => { element.dataset.marked = 'yes'; });
        await page.locator('tr[data-run="row-task"][data-marked="yes"] .status-running').waitFor({ timeout: 60_000 });
        expect(await page.evaluate(() => (window as unknown as { loadedOnce?: boolean }).loadedOnce), 'the page was not reloaded').to.equal(true);

        await page.getByLabel('Status').selectOption('running');
        await row.waitFor({ timeout: WAIT_MS });
        expect(await page.locator('tr[data-run="template"]').count()).to.equal(0);
        await server.api('POST', '/api/projects/main/runs/row-task/stop', { abort: true });
        await row.waitFor({ state: 'detached', timeout: 30_000 });
        await page.getByLabel('Status').selectOption('');
        await row.locator('.status-terminated').waitFor({ timeout: WAIT_MS });
        expect((await server.api('DELETE', '/api/projects/main/runs/row-task')).status).to.be.lessThan(300);
        await row.waitFor({ state: 'detached', timeout: WAIT_MS });

        await page.evaluate(() => window.scrollTo(0, document.documentElement.scrollHeight));
        await page.locator(`tr[data-run="old-${OLD_RUNS}"]`).waitFor({ timeout: WAIT_MS });
        // The page is as long as the whole list: only the screen in view is worth a picture.
        await page.screenshot({ path: `${artifacts}${kind}-runs-oldest.png` });
        await page.context().close();
      } finally {
        await server.db.query(`DELETE FROM runs WHERE name LIKE 'old-%' OR name = 'template'`);
      }
    });
  });
}
