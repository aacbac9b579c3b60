import { expect } from 'chai';
import { mkdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { launchChromium } from './helpers/chromium.js';
import { builtConsole, endConsoleSuite, openSignInForm, signInToConsole } from './helpers/console.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';
import { echoLlm, readyReplicas, runView, SERVICE_FLEET } from './helpers/services.js';

/** Screenshots of the pages, to look at after a run (gitignored). */
const artifacts = fileURLToPath(new URL('../test-artifacts/console/', import.meta.url));
const HOSTILE_LINE = '<img src=x onerror=alert(1)>';
const WAIT_MS = 30_000;
const LINES = 5000;

for (const kind of DATABASE_KINDS) {
  describe(`the console's run, logs, metrics and models pages in Chromium on ${kind}`, function () {
    this.timeout(180_000);
    let server: TestServer;
    let browser: Browser;
    const dialogs: string[] = [];

    before(async () => {
      mkdirSync(artifacts, { recursive: true });
      server = await startTestServer(kind, LOCAL_CONFIG, { consoleDir: await builtConsole() });
      await server.api('POST', '/api/projects/main/fleets/apply', { spec: SERVICE_FLEET });
      browser = await launchChromium();
    });

    after(() => endConsoleSuite(browser, server));

    afterEach(() => {
      expect(dialogs, 'no script from run or user data may run').to.deep.equal([]);
    });

    async function signedIn(colorScheme: 'light' | 'dark' = 'light'): Promise<Page> {
      const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, colorScheme, acceptDownloads: true });
      const page = await context.newPage();
      page.on('dialog', (dialog) => {
        dialogs.push(dialog.message());
        void dialog.dismiss();
      });
      await openSignInForm(page, server.url, WAIT_MS);
      await page.locator('#token').fill(server.adminToken);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.locator('header.top nav').getByRole('link', { name: 'Runs' }).waitFor({ timeout: WAIT_MS });
      return page;
    }

    const screenshot = (page: Page, name: string) => page.screenshot({ path: `${artifacts}${kind}-${name}.png`, fullPage: true });

    /** Pixels of a chart's canvas in its first series' colour (#2f6fed): a line was drawn through points. */
    const drawnPixels = (page: Page, title: string) => page.locator(`figure.chart[aria-label="${title}"] canvas`).evaluate((canvas: HTMLCanvasElement) => {
      const { data } = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height);
      let count = 0;
      for (let i = 0; i < data.length; i += 4) if (Math.abs(data[i]! - 47) < 30 && Math.abs(data[i + 1]! - 111) < 30 && Math.abs(data[i + 2]! - 237) < 30) count++;
      return count;
    });

    it('keeps only the rows in view in the DOM, searches, downloads the whole log as text, shows a hostile line as text, and charts the metrics', async () => {
      const commands = [`echo '${HOSTILE_LINE}'`, `seq 1 ${LINES} | sed 's/^/line /'`, 'sleep 120'];
      expect((await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'chatty', commands, ports: [8080, '*:9000'] } })).status).to.equal(201);
      const page = await signedIn();
      await page.goto(`${server.url}/projects/main/runs/chatty`);
      const logs = page.locator('.logs');
      await logs.locator('.line', { hasText: `line ${LINES}` }).waitFor({ timeout: WAIT_MS });
      expect(await logs.locator('.line').count(), 'only the rows in view (and a few around them) are in the DOM').to.be.lessThan(100);
      await page.getByText(`${(LINES + 1).toLocaleString('en-US')} lines`).waitFor({ timeout: WAIT_MS });

      // Scrolled to the top, the hostile line is drawn, as text.
      await page.getByRole('button', { name: 'Following' }).click();
      await logs.evaluate((element) => { element.scrollTop = 0; });
      await logs.locator('.line', { hasText: HOSTILE_LINE }).waitFor({ timeout: WAIT_MS });
      expect(await logs.locator('img').count(), 'a log line is never HTML').to.equal(0);

      await page.getByLabel('Search the logs').fill('line 4321');
      await page.getByText('1 matching').waitFor({ timeout: WAIT_MS });
      expect(await logs.locator('.line').allTextContents()).to.deep.equal(['line 4321']);
      expect(await logs.locator('.line mark').textContent()).to.equal('line 4321');
      await page.getByLabel('Search the logs').fill('');

      const [download] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Download' }).click()]);
      expect(download.suggestedFilename()).to.equal('chatty.log');
      const text = readFileSync((await download.path())!, 'utf8');
      expect(text.split('\n')).to.deep.equal([HOSTILE_LINE, ...Array.from({ length: LINES }, (_, i) => `line ${i + 1}`), '']);

      await page.getByRole('button', { name: 'Jump to end' }).click();
      await page.getByRole('button', { name: 'Following' }).waitFor({ timeout: WAIT_MS });
      expect(await logs.evaluate((element) => element.scrollHeight - element.scrollTop - element.clientHeight)).to.be.lessThan(20);

      // Metrics are sampled every 2 s: the CPU and memory charts draw their points as they come.
      await eventually(async () => Number(await page.locator('figure.chart[aria-label="CPU"]').getAttribute('data-points')) >= 3, WAIT_MS, 'three samples');
      await eventually(async () => (await drawnPixels(page, 'CPU')) > 20 && (await drawnPixels(page, 'Memory')) > 20, WAIT_MS, 'lines drawn on the charts');
      await page.getByText('No GPUs on this instance.').waitFor({ timeout: WAIT_MS });
      const chartTop = await page.locator('.logs-panel').evaluate((element) => element.getBoundingClientRect().top);
      await page.waitForTimeout(2500);
      expect(await page.locator('.logs-panel').evaluate((element) => element.getBoundingClientRect().top), 'new samples move nothing below the charts').to.equal(chartTop);

      // The page opened again charts the agent's samples of the job at once, not from nothing.
      await page.reload();
      await page.locator('figure.chart[aria-label="CPU"]:not([data-points="0"])').waitFor({ timeout: WAIT_MS });
      await eventually(async () => (await drawnPixels(page, 'CPU')) > 20, WAIT_MS, 'the earlier samples drawn');

      await page.locator('.ports td', { hasText: 'localhost:8080' }).waitFor({ timeout: WAIT_MS });
      await page.locator('.ports td', { hasText: 'any free port' }).waitFor({ timeout: WAIT_MS });
      await screenshot(page, 'run-metrics-logs');
      await page.getByLabel('Search the logs').fill('line 12');
      await screenshot(page, 'logs-search');
      await server.api('POST', '/api/projects/main/runs/chatty/stop', { abort: true });
      await page.context().close();
    });

    it('charts the past of a job whose page was never open: what its agent sampled in the background', async () => {
      expect((await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'unwatched', commands: ['sleep 120'] } })).status).to.equal(201);
      let past: unknown[] = [];
      await eventually(async () => {
        const answer = await server.api('GET', '/api/projects/main/runs/unwatched/metrics/history');
        past = answer.status === 200 ? answer.body as unknown[] : [];
        return past.length >= 2;
      }, WAIT_MS, 'two samples taken by the agent while nobody asked');
      const page = await signedIn();
      // Without the page's own samples, whatever it charts is the agent's.
      await page.route('**/runs/unwatched/metrics', (route) => route.abort());
      await page.goto(`${server.url}/projects/main/runs/unwatched`);
      await page.locator('figure.chart[aria-label="CPU"]:not([data-points="0"])').waitFor({ timeout: WAIT_MS });
      expect(Number(await page.locator('figure.chart[aria-label="CPU"]').getAttribute('data-points'))).to.be.greaterThanOrEqual(past.length);
      await eventually(async () => (await drawnPixels(page, 'CPU')) > 20 && (await drawnPixels(page, 'Memory')) > 20, WAIT_MS, 'the past drawn');
      await server.api('POST', '/api/projects/main/runs/unwatched/stop', { abort: true });
      await page.context().close();
    });

    it("links a dev environment's IDE as attach prints it, once it can be reached over SSH", async () => {
      expect((await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'dev-environment', name: 'box', ide: 'vscode' } })).status).to.equal(201);
      const page = await signedIn('dark');
      await page.goto(`${server.url}/projects/main/runs/box`);
      const link = page.locator('.connect a.ide-link');
      await link.waitFor({ timeout: 60_000 });
      expect(await link.getAttribute('href')).to.equal('vscode://vscode-remote/ssh-remote+box');
      await page.getByText('orchestrator ssh box').waitFor({ timeout: WAIT_MS });
      await eventually(async () => Number(await page.locator('figure.chart[aria-label="CPU"]').getAttribute('data-points')) >= 3, WAIT_MS, 'three samples');
      await screenshot(page, 'dev-environment-dark');
      await server.api('POST', '/api/projects/main/runs/box/stop', { abort: true });
      await page.context().close();
    });

    it('shows each attempt of a run that its retry submitted again, the earlier ones read whole and the latest followed', async () => {
      const spec = { type: 'task', name: 'flaky', commands: ['echo "output of an attempt"', 'exit 1'], retry: { on_events: ['error'], duration: '2m' } };
      expect((await server.api('POST', '/api/projects/main/runs/apply', { spec })).status).to.equal(201);
      const page = await signedIn();
      await page.goto(`${server.url}/projects/main/runs/flaky`);
      const logs = page.locator('.logs');
      await logs.locator('.attempt-mark', { hasText: 'attempt 2' }).waitFor({ timeout: 60_000 });
      await eventually(async () => (await logs.locator('.line').allTextContents()).filter((line) => line === 'output of an attempt').length >= 2, WAIT_MS, 'the second attempt\'s line');
      // A mark for attempt 1 only when the page opened after attempt 2 began.
      const shown = (await logs.locator('.line').allTextContents()).filter((line) => line !== '── attempt 1 ──');
      expect(shown.slice(0, 3)).to.deep.equal(['output of an attempt', '── attempt 2 ──', 'output of an attempt']);

      // Opened later, the page reads the earlier attempts whole, each after its mark.
      await eventually(async () => (await server.api('GET', '/api/projects/main/runs/flaky')).body.attempt >= 3, 60_000, 'a third attempt');
      await page.reload();
      await logs.locator('.attempt-mark', { hasText: 'attempt 3' }).waitFor({ timeout: WAIT_MS });
      expect((await logs.locator('.line').allTextContents()).slice(0, 5)).to.deep.equal(['── attempt 1 ──', 'output of an attempt', '── attempt 2 ──', 'output of an attempt', '── attempt 3 ──']);
      await screenshot(page, 'logs-attempts');
      await server.api('POST', '/api/projects/main/runs/flaky/stop', { abort: true });
      await page.context().close();
    });

    it('lists the models and streams a chat answer from echo-llm through the model endpoint, with the session cookie and its CSRF header', async () => {
      expect((await server.api('POST', '/api/projects/main/runs/apply', echoLlm({ replicas: 1, scaling: undefined }))).status).to.equal(201);
      await eventually(async () => readyReplicas(await runView(server.url, server.adminToken)).length === 1, 90_000, 'a ready replica');

      // The endpoint takes the console's session as the API does: reads with the cookie, changes only with its CSRF header.
      const session = await signInToConsole(server.url, server.adminToken);
      const chat = (headers: Record<string, string>) => fetch(`${server.url}/proxy/models/main/v1/chat/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }),
      });
      const listed = await fetch(`${server.url}/proxy/models/main/v1/models`, { headers: { cookie: session.cookie } });
      expect((await listed.json()).data.map((model: { id: string }) => model.id)).to.deep.equal(['echo']);
      const noCsrf = await chat({ cookie: session.cookie });
      expect(noCsrf.status).to.equal(403);
      expect((await noCsrf.json()).error).to.include({ code: 'csrf' });
      expect((await chat({ cookie: session.cookie, 'x-csrf-token': 'f'.repeat(64) })).status).to.equal(403);
      expect((await chat({ cookie: 'orchestrator_session=not-a-session', 'x-csrf-token': session.csrfToken })).status).to.equal(401);
      expect((await chat({})).status).to.equal(401);
      const answered = await chat({ cookie: session.cookie, 'x-csrf-token': session.csrfToken });
      expect(answered.status).to.equal(200);
      expect((await answered.json()).choices[0].message.content).to.equal('echo: hi');

      const page = await signedIn();
      await page.locator('header.top nav').getByRole('link', { name: 'Models' }).click();
      await page.waitForURL(`${server.url}/projects/main/models`);
      await page.locator('tr[data-model="echo"]').waitFor({ timeout: WAIT_MS });
      const sent = page.waitForRequest((request) => request.url().endsWith('/proxy/models/main/v1/chat/completions'));
      await page.getByLabel('Message').fill(`tell me ${HOSTILE_LINE} now`);
      await page.getByRole('button', { name: 'Send' }).click();
      const request = await sent;
      expect(JSON.parse(request.postData()!)).to.deep.include({ model: 'echo', stream: true });
      expect((await (await request.response())!.allHeaders())['content-type']).to.match(/^text\/event-stream/);
      await page.locator('.chat-message-assistant p', { hasText: `echo: tell me ${HOSTILE_LINE} now` }).waitFor({ timeout: WAIT_MS });
      expect(await page.locator('.chat img').count(), 'an answer is never HTML').to.equal(0);
      await screenshot(page, 'models-chat');

      await page.goto(`${server.url}/projects/main/runs/echo-llm`);
      await page.locator('figure.chart[aria-label="Requests per second"][data-points="60"]').waitFor({ timeout: WAIT_MS });
      await eventually(async () => (await drawnPixels(page, 'Requests per second')) > 20, WAIT_MS, 'the requests the chat made, charted');
      await screenshot(page, 'service-charts');
      await page.context().close();
    });
  });
}
