import { expect } from 'chai';
import { get, type IncomingHttpHeaders } from 'node:http';
import { gunzipSync } from 'node:zlib';
import { hashToken } from '../store/projects.js';
import { builtConsole, signInToConsole } from './helpers/console.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const sleeper = (name: string) => ({ spec: { type: 'task', name, commands: ['sleep 600'] } });

/** A GET that asks for `encoding` and keeps the body's bytes as sent (fetch would decompress them). */
function rawGet(url: string, encoding: string): Promise<{ headers: IncomingHttpHeaders; body: Buffer }> {
  return new Promise((resolve, reject) => {
    get(url, { headers: { 'accept-encoding': encoding } }, (response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk));
      response.on('end', () => resolve({ headers: response.headers, body: Buffer.concat(chunks) }));
    }).on('error', reject);
  });
}

for (const kind of DATABASE_KINDS) {
  describe(`the console's session and files on ${kind}`, function () {
    this.timeout(60_000);
    let server: TestServer;
    before(async () => {
      server = await startTestServer(kind, LOCAL_CONFIG, { consoleDir: await builtConsole() });
    });
    after(async () => { await server.stop(); });

    const withCookie = (cookie: string, method: string, path: string, options: { csrf?: string; body?: unknown } = {}) => fetch(`${server.url}${path}`, {
      method,
      headers: { cookie, 'content-type': 'application/json', ...(options.csrf === undefined ? {} : { 'x-csrf-token': options.csrf }) },
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });

    it('refuses a wrong token with a message and no cookie', async () => {
      const answer = await signInToConsole(server.url, 'not-a-token');
      expect(answer.status).to.equal(401);
      expect(answer.setCookie).to.equal('');
      expect(answer.body.error.message).to.match(/not valid/);
    });

    it('refuses a sign-in that another site could have made: not JSON, or from another origin', async () => {
      const signIn = (headers: Record<string, string>) => fetch(`${server.url}/api/session`, { method: 'POST', headers, body: JSON.stringify({ token: server.adminToken }) });
      const form = await signIn({ 'content-type': 'text/plain' });
      expect(form.status).to.equal(415);
      const elsewhere = await signIn({ 'content-type': 'application/json', origin: 'http://evil.example' });
      expect(elsewhere.status).to.equal(403);
      for (const refused of [form, elsewhere]) expect(refused.headers.get('set-cookie')).to.equal(null);
      expect((await signIn({ 'content-type': 'application/json', origin: server.url })).status).to.equal(201);
    });

    it('exchanges a token for an httpOnly SameSite=Strict cookie, kept hashed, that reads the API as that user', async () => {
      const session = await signInToConsole(server.url, server.adminToken);
      expect(session.status).to.equal(201);
      expect(session.setCookie).to.match(/^orchestrator_session=[0-9a-f]{64}; Path=\/; HttpOnly; SameSite=Strict; Max-Age=\d+$/);
      expect(JSON.stringify(session.body)).not.to.include(server.adminToken);
      expect(session.body.user).to.include({ name: 'admin', admin: true });
      const cookieToken = session.cookie.split('=')[1];
      const stored = await server.db.query<{ token_hash: string }>('SELECT token_hash FROM console_sessions');
      expect(stored.map((row) => row.token_hash)).to.include(hashToken(cookieToken)).and.not.to.include(cookieToken);

      const runs = await withCookie(session.cookie, 'GET', '/api/projects/main/runs');
      expect(runs.status).to.equal(200);
      const again = await (await withCookie(session.cookie, 'GET', '/api/session')).json();
      expect(again.csrfToken).to.equal(session.csrfToken);
    });

    it('refuses a change made with the cookie without the CSRF token, and stores nothing', async () => {
      const session = await signInToConsole(server.url, server.adminToken);
      for (const csrf of [undefined, '', 'f'.repeat(64)]) {
        const refused = await withCookie(session.cookie, 'POST', '/api/projects/main/runs/apply', { csrf, body: sleeper('forged') });
        expect(refused.status, `csrf ${csrf}`).to.equal(403);
        expect((await refused.json()).error.code).to.equal('csrf');
      }
      expect((await server.api('GET', '/api/projects/main/runs?all=true')).body).to.deep.equal([]);
      const applied = await withCookie(session.cookie, 'POST', '/api/projects/main/runs/apply', { csrf: session.csrfToken, body: sleeper('from-console') });
      expect(applied.status).to.equal(201);
      expect((await applied.json()).user).to.equal('admin');
      const stopped = await withCookie(session.cookie, 'POST', '/api/projects/main/runs/from-console/stop', { csrf: session.csrfToken, body: { abort: true } });
      expect(stopped.status).to.equal(202);
    });

    it('refuses an expired session, and one whose token was rotated', async () => {
      const { body: bob } = await server.api('POST', '/api/users', { name: 'bob' });
      const expiring = await signInToConsole(server.url, bob.token);
      const rotated = await signInToConsole(server.url, bob.token);
      await server.db.query(`UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE token_hash = $1`, [hashToken(expiring.cookie.split('=')[1])]);
      const expired = await withCookie(expiring.cookie, 'GET', '/api/projects');
      expect(expired.status).to.equal(401);
      expect((await expired.json()).error.message).to.match(/expired or was signed out; sign in again/);
      expect((await withCookie(rotated.cookie, 'GET', '/api/projects')).status).to.equal(200);
      await server.api('POST', '/api/users/bob/rotate-token');
      expect((await withCookie(rotated.cookie, 'GET', '/api/projects')).status).to.equal(401);
    });

    it('signs out only with the CSRF token, and the cookie then opens nothing', async () => {
      const session = await signInToConsole(server.url, server.adminToken);
      expect((await withCookie(session.cookie, 'DELETE', '/api/session')).status).to.equal(403);
      const out = await withCookie(session.cookie, 'DELETE', '/api/session', { csrf: session.csrfToken });
      expect(out.status).to.equal(204);
      expect(out.headers.get('set-cookie')).to.match(/^orchestrator_session=; .*Max-Age=0/);
      expect((await withCookie(session.cookie, 'GET', '/api/projects/main/runs')).status).to.equal(401);
    });

    it('keeps Bearer tokens working beside the cookie', async () => {
      expect((await server.api('GET', '/api/projects/main/runs')).status).to.equal(200);
      expect((await server.api('GET', '/api/projects/main/runs', undefined, 'wrong')).status).to.equal(401);
    });

    it('streams the runs list live: the whole list at once, then only the runs that changed and those that left', async () => {
      await server.api('POST', '/api/projects/main/runs/apply', sleeper('unchanged'));
      // Once the scheduler has said why it waits, nothing changes it while the test runs.
      await eventually(async () => !!(await server.api('GET', '/api/projects/main/runs/unchanged')).body.statusMessage, 30_000, 'a reason for unchanged');
      const session = await signInToConsole(server.url, server.adminToken);
      const abort = new AbortController();
      const response = await fetch(`${server.url}/api/projects/main/live`, { headers: { cookie: session.cookie }, signal: abort.signal });
      expect(response.headers.get('content-type')).to.match(/^text\/event-stream/);
      const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
      let received = '';
      const nextMessage = async (): Promise<{ event: string; data: any }> => {
        for (;;) {
          const end = received.indexOf('\n\n');
          if (end !== -1) {
            const message = received.slice(0, end);
            received = received.slice(end + 2);
            const parts = /^event: (\w+)\ndata: (.*)$/m.exec(message);
            if (parts) return { event: parts[1]!, data: JSON.parse(parts[2]!) };
            continue;
          }
          const { value, done } = await reader.read();
          if (done) throw new Error('the live stream ended');
          received += value;
        }
      };
      /** The versions of the other lists, as sent. */
      const lists: Array<{ events: string }> = [];
      /** Changes until `until` holds of them all, which must each name only the runs given (`lists` kept aside). */
      const changesUntil = async (until: (upserts: string[], removals: string[]) => boolean, only: string[]) => {
        const upserts: string[] = [];
        const removals: string[] = [];
        while (!until(upserts, removals)) {
          const message = await nextMessage();
          if (message.event === 'lists') { lists.push(message.data); continue; }
          expect(message.event).to.equal('changes');
          upserts.push(...message.data.upserts.map((run: { name: string }) => run.name));
          removals.push(...message.data.removals);
        }
        expect([...new Set(upserts)].filter((name) => !only.includes(name)), 'runs that did not change are not sent again').to.deep.equal([]);
        return { upserts, removals };
      };
      try {
        const first = await nextMessage();
        expect(first.event).to.equal('snapshot');
        expect(first.data.limit).to.be.greaterThanOrEqual(1000);
        expect(first.data.runs.map((run: { name: string }) => run.name)).to.include('unchanged').and.not.to.include('streamed');
        const firstLists = await nextMessage();
        expect(firstLists.event).to.equal('lists');
        expect(firstLists.data).to.have.keys('events', 'fleets', 'gateways');
        await server.api('POST', '/api/projects/main/runs/apply', sleeper('streamed'));
        await changesUntil((upserts) => upserts.includes('streamed'), ['streamed']);
        // The run's Submitted event is a new event: the events list's version moved on.
        while (!lists.some((sent) => sent.events !== firstLists.data.events)) {
          const message = await nextMessage();
          if (message.event === 'lists') lists.push(message.data);
        }
        await server.api('POST', '/api/projects/main/runs/streamed/stop', { abort: true });
        await changesUntil((upserts) => upserts.includes('streamed'), ['streamed']);
        const streamed = (await server.api('GET', '/api/projects/main/runs/streamed')).body;
        await eventually(async () => (await server.api('GET', '/api/projects/main/runs/streamed')).body.status === 'terminated', 30_000, 'streamed to end');
        await server.api('DELETE', '/api/projects/main/runs/streamed');
        await changesUntil((_, removals) => removals.includes(streamed.id), ['streamed']);
        await server.api('POST', '/api/projects/main/runs/unchanged/stop', { abort: true });
      } finally {
        abort.abort();
      }
    });

    it('sends the hashed files gzip-compressed to a client that takes gzip, and as they are to one that does not', async () => {
      const html = await (await fetch(`${server.url}/`)).text();
      for (const asset of [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((match) => match[1]!)) {
        const plain = await rawGet(`${server.url}${asset}`, 'identity');
        const gzipped = await rawGet(`${server.url}${asset}`, 'gzip, deflate, br');
        expect(plain.headers['content-encoding'], asset).to.equal(undefined);
        expect(gzipped.headers['content-encoding'], asset).to.equal('gzip');
        expect(gzipped.headers.vary, asset).to.match(/accept-encoding/i);
        expect(gzipped.body.length, asset).to.be.lessThan(plain.body.length / 2);
        expect(gunzipSync(gzipped.body).equals(plain.body), asset).to.equal(true);
      }
    });

    it('serves the console at / and at every page, index.html uncached, hashed files for a year, under a CSP without inline scripts, never framed', async () => {
      for (const path of ['/', '/projects/main/runs', '/projects/main/runs/some-run']) {
        const page = await fetch(`${server.url}${path}`);
        expect(page.status, path).to.equal(200);
        expect(page.headers.get('content-type')).to.match(/^text\/html/);
        expect(page.headers.get('cache-control')).to.equal('no-cache');
        const csp = page.headers.get('content-security-policy')!;
        expect(csp).to.include("script-src 'self'").and.not.to.include('unsafe-inline').and.not.to.include('unsafe-eval');
        // Services are proxied on this origin: none of their pages (nor another site's) may frame the console.
        expect(csp).to.include("frame-ancestors 'none'");
        expect(page.headers.get('x-frame-options')).to.equal('DENY');
        expect(page.headers.get('cross-origin-resource-policy')).to.equal('same-origin');
        const html = await page.text();
        expect(html).not.to.match(/<script>|<script [^>]*>[^<]/);
        const assets = [...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((match) => match[1]);
        // The stylesheet, the script, and the chunks the script imports at once (modulepreload).
        expect(assets.filter((asset) => asset.endsWith('.css'))).to.have.length(1);
        expect(assets.filter((asset) => asset.endsWith('.js'))).to.have.length.greaterThanOrEqual(1);
        for (const asset of assets) {
          expect(asset).to.match(/-[A-Z0-9]{8}\.(js|css)$/);
          const file = await fetch(`${server.url}${asset}`);
          expect(file.status, asset).to.equal(200);
          expect(file.headers.get('cache-control')).to.equal('public, max-age=31536000, immutable');
        }
      }
      const missing = await fetch(`${server.url}/assets/console-NOSUCH00.js`);
      expect(missing.status).to.equal(404);
      const api = await fetch(`${server.url}/api/no-such-route`);
      expect(api.status).to.equal(404);
      expect((await api.json()).error.code).to.equal('not_found');
    });
  });
}
