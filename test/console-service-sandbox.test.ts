import { expect } from 'chai';
import type { Browser } from 'playwright-core';
import type { Run } from '../api/objects.js';
import { launchChromium } from './helpers/chromium.js';
import { endConsoleSuite } from './helpers/console.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

/**
 * A public service's page, as any project member could write it: it reads the console's session and CSRF token with
 * the visitor's cookie and creates a user with them, and it calls its own API at a relative URL.
 */
const HOSTILE_PAGE = `<!doctype html><title>a public service</title><body><script>
(async () => {
  const result = { origin: self.origin };
  try {
    result.storage = localStorage.length;
  } catch (error) {
    result.storage = error.name;
  }
  try {
    result.own = await (await fetch('own')).text();
  } catch (error) {
    result.own = error.name;
  }
  try {
    const session = await (await fetch('/api/session')).json();
    result.csrf = session.csrfToken;
    const created = await fetch('/api/users', {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': session.csrfToken }, body: JSON.stringify({ name: 'intruder' }),
    });
    result.created = created.status;
  } catch (error) {
    result.session = error.name;
  }
  document.body.dataset.result = JSON.stringify(result);
})();
</script></body>`;

/** Serves the page at / and its own API at /own, which answers any origin (CORS), as a sandboxed page needs. */
const SERVICE = `
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
const page = readFileSync('page.html');
createServer((req, res) => {
  if (req.url === '/own') {
    res.writeHead(200, { 'content-type': 'text/plain', 'access-control-allow-origin': '*' });
    return res.end('the service answered');
  }
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
  res.end(page);
}).listen(Number(process.env.PORT ?? 8000), '127.0.0.1');
`;

const base64 = (text: string) => Buffer.from(text).toString('base64');

for (const kind of DATABASE_KINDS) {
  describe(`a public service's page in the browser of a signed-in admin (${kind})`, function () {
    this.timeout(120_000);
    let server: TestServer;
    let browser: Browser;

    before(async () => {
      server = await startTestServer(kind, LOCAL_CONFIG);
      await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } });
      const applied = await server.api('POST', '/api/projects/main/runs/apply', {
        spec: { type: 'service', name: 'page', port: 8000, auth: false, files: ['server.mjs', 'page.html'], commands: ['node server.mjs'] },
        files: [{ path: 'server.mjs', contentBase64: base64(SERVICE) }, { path: 'page.html', contentBase64: base64(HOSTILE_PAGE) }],
      });
      expect(applied.status, JSON.stringify(applied.body)).to.equal(201);
      await eventually(async () => ((await server.api('GET', '/api/projects/main/runs/page')).body as Run).service?.replicas
        .some((replica) => replica.state === 'ready') ?? false, 60_000, 'the service to be ready');
      browser = await launchChromium();
    });

    after(() => endConsoleSuite(browser, server));

    it('runs in an opaque origin: it cannot read the session or act as the admin, has no storage, and still reaches its own API that answers CORS', async () => {
      const context = await browser.newContext();
      const signedIn = await context.request.post(`${server.url}/api/session`, { data: { token: server.adminToken } });
      expect(signedIn.status()).to.equal(201);
      const page = await context.newPage();
      await page.goto(`${server.url}/proxy/services/main/page/`);
      const result = JSON.parse(await page.locator('body[data-result]').getAttribute('data-result', { timeout: 20_000 }) ?? '{}');
      expect(result).to.deep.equal({ origin: 'null', storage: 'SecurityError', own: 'the service answered', session: 'TypeError' });
      const users = (await server.api('GET', '/api/users')).body as Array<{ name: string }>;
      expect(users.map((user) => user.name)).not.to.include('intruder');
      // The admin's session is untouched: the console still answers it.
      expect((await context.request.get(`${server.url}/api/session`)).status()).to.equal(200);
    });
  });
}
