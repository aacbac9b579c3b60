import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI, { NotFoundError } from 'openai';
import WebSocket from 'ws';
import type { ModelList } from '../api/gateway.js';
import type { Run } from '../api/objects.js';
import { AgentClient, AgentError } from '../agent/client.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { waitForState } from './helpers/agent-jobs.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventArrivals, rawGet, upgradeStatus } from './helpers/raw-http.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

const SERVICES_DIR = join(import.meta.dirname, '..', 'examples', 'services');

/** The replicas' own server: says which replica answered and what it received; a few paths answer slowly, late or never. */
const UPSTREAM = `
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
const replica = randomUUID();
createServer(async (req, res) => {
  const url = new URL(req.url, 'http://upstream');
  const at = (name) => url.pathname.endsWith('/' + name);
  if (at('silent')) return;
  if (at('own-csp')) {
    res.writeHead(200, { 'content-type': 'text/html', 'content-security-policy': "img-src 'self'" });
    return res.end('<p>a page with its own policy</p>');
  }
  if (at('quiet')) {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    return res.flushHeaders();
  }
  if (at('stall')) {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('first bytes');
    return;
  }
  if (at('events')) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    let sent = 0;
    const timer = setInterval(() => {
      res.write('data: ' + JSON.stringify({ n: sent, emittedAt: Date.now() }) + '\\n\\n');
      if (++sent === 4) { clearInterval(timer); res.end(); }
      // Far enough apart that a busy machine's stall of a few hundred milliseconds does not pass for a batch.
    }, 600);
    return;
  }
  let bodyBytes = 0;
  try {
    for await (const chunk of req) bodyBytes += chunk.length;
  } catch {
    return; // the gateway cut the request off
  }
  if (at('slow')) await new Promise((resolve) => setTimeout(resolve, Number(url.searchParams.get('ms'))));
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ replica, method: req.method, url: req.url, headers: req.headers, bodyBytes }));
}).listen(Number(process.env.PORT), '127.0.0.1');
`;

const base64 = (text: string | Buffer) => Buffer.from(text).toString('base64');
const upstreamFiles = [{ path: 'server.mjs', contentBase64: base64(UPSTREAM) }];
const exampleFiles = (name: string) => [{ path: 'server.mjs', contentBase64: base64(readFileSync(join(SERVICES_DIR, name, 'server.mjs'))) }];
const service = (name: string, fields: Record<string, unknown>) => ({ type: 'service', name, port: 8000, files: ['server.mjs'], commands: ['node server.mjs'], ...fields });

/** What the server's proxy puts every service's page in: an opaque origin, away from the console's. */
const SANDBOX = 'sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-downloads allow-modals';

interface Seen {
  replica: string;
  method: string;
  url: string;
  headers: Record<string, string | undefined>;
  bodyBytes: number;
}

for (const kind of DATABASE_KINDS) {
  describe(`gateway: services and models through the server (${kind})`, function () {
    this.timeout(60_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    let memberToken: string;
    let outsiderToken: string;
    const admin = () => ({ authorization: `Bearer ${server.adminToken}` });
    const proxied = (path: string, init: RequestInit = {}) => fetch(`${server.url}/proxy/services/main/${path}`, init);
    const seen = async (path: string, init: RequestInit = { headers: admin() }): Promise<Seen> => {
      const response = await proxied(path, init);
      expect(response.status, await response.clone().text()).to.equal(200);
      return await response.json() as Seen;
    };
    const runId = async (name: string) =>
      (await server.db.query(`SELECT id FROM runs WHERE name = $1 AND service_id IS NULL`, [name]))[0]!.id as string;

    before(async function () {
      this.timeout(180_000);
      emulator = await startEmulator({ port: 0, bootDelayMs: 100 });
      server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey));
      const applied = await server.api('POST', '/api/projects/main/apply', {
        items: [
          { spec: { type: 'fleet', name: 'gpucloud', backends: ['gpucloud'], nodes: '0..8', resources: { gpu: '24GB..' } } },
          {
            spec: service('app', { replicas: 2, first_byte_timeout: '2s', idle_timeout: '1s', max_body_size: '1MB' }),
            files: upstreamFiles,
          },
          { spec: service('open', { auth: false, strip_prefix: false }), files: upstreamFiles },
          { spec: service('llm', { model: 'echo', env: { MODEL: 'echo', TOKEN_DELAY_MS: '5' } }), files: exampleFiles('echo-llm') },
          { spec: service('ws', {}), files: exampleFiles('ws-echo') },
          { spec: service('cold', { replicas: 0, cold_start_timeout: '1s' }), files: upstreamFiles },
          { spec: service('zero', { replicas: '0..1', scaling: { metric: 'rps', target: 1 }, cold_start_timeout: '50s' }), files: upstreamFiles },
        ],
      });
      expect(applied.status, JSON.stringify(applied.body)).to.equal(201);
      for (const [user, member] of [['member', true], ['outsider', false]] as const) {
        const created = await server.api('POST', '/api/users', { name: user });
        expect(created.status, JSON.stringify(created.body)).to.equal(201);
        if (member) expect((await server.api('POST', '/api/projects/main/members', { user, role: 'user' })).status).to.equal(201);
        if (member) memberToken = created.body.token;
        else outsiderToken = created.body.token;
      }
      const expected: Record<string, number> = { app: 2, open: 1, llm: 1, ws: 1 };
      await eventually(async () => {
        for (const [name, count] of Object.entries(expected)) {
          const run = (await server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
          if ((run.service?.replicas ?? []).filter((replica) => replica.state === 'ready').length < count) return false;
        }
        return true;
      }, 150_000, 'every replica to be ready');
    });

    after(async function () {
      this.timeout(60_000);
      await server?.stop();
      await emulator?.close();
    });

    describe('service proxy', () => {
      it('forwards to the service without its prefix, with the query, and says where the request came from', async () => {
        const answer = await seen('app/hello/world?x=1&y=two');
        expect(answer.method).to.equal('GET');
        expect(answer.url).to.equal('/hello/world?x=1&y=two');
        const { host } = new URL(server.url);
        expect(answer.headers).to.include({
          'x-forwarded-host': host,
          'x-forwarded-proto': 'http',
          'x-forwarded-prefix': '/proxy/services/main/app',
        });
        expect(answer.headers['x-forwarded-for']).to.match(/127\.0\.0\.1$/);
        expect(answer.headers).not.to.have.property('authorization');
        expect(answer.headers).not.to.have.property('x-agent-authorization');
        expect((await seen('app')).url).to.equal('/');
      });

      it('keeps the whole path for a service with strip_prefix: false', async () => {
        const answer = await seen('open/hello?x=1', {});
        expect(answer.url).to.equal('/proxy/services/main/open/hello?x=1');
        expect(answer.headers).not.to.have.property('x-forwarded-prefix');
      });

      it('admits members and admins to a service with auth, by their token, and no one else', async () => {
        const status = async (headers: Record<string, string>) => {
          const response = await proxied('app/', { headers });
          return { status: response.status, body: await response.json() as { error?: { code: string } } };
        };
        const missing = await status({});
        expect(missing.status).to.equal(401);
        expect(missing.body.error?.code).to.equal('unauthorized');
        expect((await status({ authorization: 'Bearer not-a-token' })).status).to.equal(401);
        const outsider = await status({ authorization: `Bearer ${outsiderToken}` });
        expect(outsider.status).to.equal(403);
        expect(outsider.body.error?.code).to.equal('forbidden');
        expect((await server.api('GET', '/api/projects/main/runs', undefined, outsiderToken)).status, 'the API answers the same').to.equal(403);
        const member = await seen('app/', { headers: { authorization: `Bearer ${memberToken}` } });
        expect(member.headers).not.to.have.property('authorization');
        expect((await status(admin())).status).to.equal(200);
      });

      it('lets anyone call a public service and passes its Authorization header on', async () => {
        expect((await seen('open/', {})).headers).not.to.have.property('authorization');
        const withKey = await seen('open/', { headers: { authorization: 'Bearer the-service-own-key' } });
        expect(withKey.headers.authorization).to.equal('Bearer the-service-own-key');
      });

      it('never passes on the console\'s session cookie or its CSRF header, and keeps the other cookies', async () => {
        const mixed = await seen('open/', { headers: { cookie: 'theme=dark; orchestrator_session=the-session; lang=en', 'x-csrf-token': 'the-csrf' } });
        expect(mixed.headers.cookie).to.equal('theme=dark; lang=en');
        expect(mixed.headers).not.to.have.property('x-csrf-token');
        const sessionOnly = await seen('app/', { headers: { ...admin(), cookie: 'orchestrator_session=the-session' } });
        expect(sessionOnly.headers).not.to.have.property('cookie');
      });

      it('sandboxes every answer from the proxy, keeping a service\'s own Content-Security-Policy beside the sandbox', async () => {
        const sandbox = (response: Response) => response.headers.get('content-security-policy');
        expect(sandbox(await proxied('open/'))).to.equal(SANDBOX);
        expect(sandbox(await proxied('app/', { headers: admin() }))).to.equal(SANDBOX);
        expect(sandbox(await proxied('nope/')), 'the gateway\'s own refusal').to.equal(SANDBOX);
        expect(sandbox(await proxied('app/')), 'the gateway\'s own refusal').to.equal(SANDBOX);
        const own = await rawGet(server.url, '/proxy/services/main/open/own-csp');
        expect(own.status).to.equal(200);
        expect(own.headers['content-security-policy']).to.equal(`img-src 'self', ${SANDBOX}`);
      });

      it('answers 404 for an unknown service and for names that are not names, without forwarding anything', async () => {
        for (const path of ['nope/', '..%2f..', '..%2f../api/projects', '%2e%2e/app/', 'app%00/', 'APP/', '../../api/projects']) {
          const response = await rawGet(server.url, `/proxy/services/main/${path}`);
          expect(response.status, path).to.equal(404);
          expect(JSON.parse(response.body).error.code, path).to.equal('not_found');
        }
        expect((await rawGet(server.url, '/proxy/services/nowhere/app/')).status).to.equal(404);
      });

      it('passes Server-Sent Events on one by one, as the service emits them', async () => {
        const response = await proxied('app/events', { headers: admin() });
        expect(response.headers.get('content-type')).to.equal('text/event-stream');
        const events = await eventArrivals<{ n: number; emittedAt: number }>(response);
        expect(events.map((event) => event.n)).to.deep.equal([0, 1, 2, 3]);
        for (let i = 0; i + 1 < events.length; i++) {
          // Each event was here before the service wrote the next one: nothing held it back to send a batch.
          expect(events[i]!.arrivedAt, `event ${i}`).to.be.below(events[i + 1]!.emittedAt);
        }
      });

      it('carries a WebSocket both ways, and authenticates the upgrade', async () => {
        const url = `${server.url.replace(/^http/, 'ws')}/proxy/services/main/ws/`;
        const socket = new WebSocket(url, { headers: admin() });
        await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
        const replies: string[] = [];
        for (const text of ['hello', 'and again']) {
          socket.send(text);
          replies.push(await new Promise<string>((resolve) => socket.once('message', (data) => resolve(String(data)))));
        }
        socket.close();
        expect(replies).to.deep.equal(['hello', 'and again']);
        expect(await upgradeStatus(url, {})).to.equal(401);
        expect(await upgradeStatus(url, { authorization: `Bearer ${outsiderToken}` })).to.equal(403);
        expect(await upgradeStatus(`${server.url.replace(/^http/, 'ws')}/proxy/services/main/none/`, admin())).to.equal(404);
      });

      it('sends a request to the replica with the fewest in flight: a slow one on the first sends the next ones to the second', async () => {
        const slow = seen('app/slow?ms=1200');
        await new Promise((resolve) => setTimeout(resolve, 300));
        const next = await seen('app/who');
        const after = await seen('app/who');
        const slowReplica = (await slow).replica;
        expect(next.replica).not.to.equal(slowReplica);
        expect(after.replica, 'the replica that is still busy is passed over again').to.equal(next.replica);
        const turns = new Set([(await seen('app/who')).replica, (await seen('app/who')).replica]);
        expect(turns.size, 'idle replicas take turns').to.equal(2);
      });

      it('passes an answer\'s head on before its first byte, so that a stream that starts quiet is seen as started', async () => {
        const response = await proxied('app/quiet', { headers: admin(), signal: AbortSignal.timeout(5000) });
        expect(response.status).to.equal(200);
        expect(response.headers.get('content-type')).to.equal('text/event-stream');
        await response.body?.cancel();
      });

      it('answers 504 when the service does not start its answer within first_byte_timeout', async () => {
        const started = Date.now();
        const response = await proxied('app/silent', { headers: admin() });
        expect(response.status).to.equal(504);
        expect((await response.json() as { error: { code: string } }).error.code).to.equal('upstream_timeout');
        expect(Date.now() - started).to.be.at.least(1900);
      });

      it('cuts an answer that pauses longer than idle_timeout', async () => {
        const response = await proxied('app/stall', { headers: admin() });
        expect(response.status).to.equal(200);
        let error: unknown;
        await response.text().catch((caught: unknown) => { error = caught; });
        expect(error, 'the body ends in an error, not as if complete').to.be.instanceOf(Error);
      });

      it('answers 413 to a body over max_body_size, declared or streamed, and passes one under it', async () => {
        const declared = await proxied('app/upload', { method: 'POST', headers: admin(), body: Buffer.alloc(2 * 1024 * 1024) });
        expect(declared.status).to.equal(413);
        expect((await declared.json() as { error: { code: string } }).error.code).to.equal('payload_too_large');
        const chunk = Buffer.alloc(256 * 1024);
        let sent = 0;
        const streamed = new ReadableStream<Uint8Array>({
          pull(controller) {
            if (sent++ === 8) controller.close();
            else controller.enqueue(chunk);
          },
        });
        const response = await proxied('app/upload', { method: 'POST', headers: admin(), body: streamed, duplex: 'half' } as RequestInit);
        expect(response.status).to.equal(413);
        const small = await seen('app/upload', { method: 'POST', headers: admin(), body: Buffer.alloc(512 * 1024) });
        expect(small.bodyBytes).to.equal(512 * 1024);
      });

      it('holds a request for a service with no ready replica up to cold_start_timeout, then answers 503 with Retry-After', async () => {
        const started = Date.now();
        const response = await proxied('cold/', { headers: admin() });
        expect(response.status).to.equal(503);
        expect(response.headers.get('retry-after')).to.match(/^\d+$/);
        expect((await response.json() as { error: { code: string } }).error.code).to.equal('no_replica');
        expect(Date.now() - started).to.be.at.least(900);
        const cold = await runId('cold');
        const rows = await server.db.query(`SELECT requests, inflight FROM service_stats WHERE run_id = $1`, [cold]);
        expect(rows.reduce((sum, row) => sum + row.requests, 0), 'the held request was written at once').to.be.at.least(1);
        expect(Math.max(...rows.map((row) => row.inflight))).to.be.at.least(1);
      });

      it('holds a request for a service scaled to zero while it starts a replica, and then answers it', async () => {
        expect((await server.api('GET', '/api/projects/main/runs/zero')).body.service.replicas).to.deep.equal([]);
        const answer = await seen('zero/woken');
        expect(answer.url).to.equal('/woken');
        const run = (await server.api('GET', '/api/projects/main/runs/zero')).body as Run;
        expect(run.service?.replicas.map((replica) => replica.state)).to.deep.equal(['ready']);
      });

      it('writes each service\'s requests, errors and latencies per second', async () => {
        const app = await runId('app');
        const before = await server.db.query(`SELECT coalesce(sum(requests), 0)::int AS requests FROM service_stats WHERE run_id = $1`, [app]);
        for (let i = 0; i < 3; i++) await seen('app/counted');
        const counted = await eventually(async () => {
          const [row] = await server.db.query(
            `SELECT sum(requests)::int AS requests, sum(errors)::int AS errors, max(inflight) AS inflight, array_agg(latency) AS latency
             FROM service_stats WHERE run_id = $1`, [app]);
          return row!.requests >= before[0]!.requests + 3 && row;
        }, 5000, 'the requests to be written');
        expect(counted.errors, 'the 504 and the cut answer count as errors').to.be.at.least(2);
        expect(counted.inflight).to.be.at.least(2);
        const latencies = (counted.latency as number[][]).flat().reduce((sum, count) => sum + count, 0);
        expect(latencies, 'one latency per answer').to.be.at.least(counted.requests - counted.errors);
      });

      // Last of the service's cases: it stops one of app's replicas.
      it('sends a request again, to another replica, when the one it went to has just stopped', async () => {
        const [gone] = await server.db.query(
          `SELECT r.id, i.agent_url, i.agent_token FROM runs r JOIN instances i ON i.id = r.instance_id
           WHERE r.service_id = $1 AND r.ready_at IS NOT NULL ORDER BY r.replica LIMIT 1`, [await runId('app')]);
        const agent = new AgentClient(gone!.agent_url, gone!.agent_token);
        await agent.stop(gone!.id, { graceSeconds: 0 });
        // The server may notice first and have the agent forget the job: gone is as good as stopped.
        await waitForState(agent, gone!.id, ['stopped', 'exited', 'failed']).catch((error) => {
          if (!(error instanceof AgentError && error.status === 404)) throw error;
        });
        const answers = await Promise.all([1, 2, 3, 4].map(() => proxied('app/after-stop', { headers: admin() })));
        expect(answers.map((answer) => answer.status)).to.deep.equal([200, 200, 200, 200]);
        const replicas = new Set(await Promise.all(answers.map(async (answer) => (await answer.json() as Seen).replica)));
        expect(replicas.size, 'all from the replica still running').to.equal(1);
      });
    });

    describe('model endpoint', () => {
      const openai = (apiKey: string) => new OpenAI({ baseURL: `${server.url}/proxy/models/main/v1`, apiKey });

      it('lists the project\'s models, those behind auth only to members', async () => {
        for (const path of ['models', 'v1/models']) {
          const response = await fetch(`${server.url}/proxy/models/main/${path}`, { headers: admin() });
          expect(response.status).to.equal(200);
          const list = await response.json() as ModelList;
          expect(list.object).to.equal('list');
          expect(list.data.map(({ id, object, owned_by }) => ({ id, object, owned_by }))).to.deep.equal([{ id: 'echo', object: 'model', owned_by: 'main' }]);
          expect(list.data[0]!.created).to.be.within(Date.now() / 1000 - 600, Date.now() / 1000);
        }
        const anonymous = await (await fetch(`${server.url}/proxy/models/main/models`)).json() as ModelList;
        expect(anonymous.data).to.deep.equal([]);
        expect((await fetch(`${server.url}/proxy/models/main/models`)).headers.get('content-security-policy')).to.equal(SANDBOX);
        const listed = await openai(memberToken).models.list();
        expect(listed.data.map((model) => model.id)).to.deep.equal(['echo']);
      });

      it('answers a chat completion through the official client, whole and streamed', async () => {
        const client = openai(memberToken);
        const whole = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hello through the gateway' }] });
        expect(whole.choices[0]!.message.content).to.equal('echo: hello through the gateway');
        const { response } = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }).withResponse();
        expect(response.headers.get('content-security-policy')).to.equal(SANDBOX);
        const stream = await client.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'one two three four' }], stream: true });
        const pieces: string[] = [];
        for await (const chunk of stream) {
          for (const choice of chunk.choices) if (choice.delta.content) pieces.push(choice.delta.content);
        }
        expect(pieces.length).to.be.greaterThan(3);
        expect(pieces.join('')).to.equal('echo: one two three four');
      });

      it('answers 400 in OpenAI\'s shape to a body that is not JSON, and 404 to a model no service declares', async () => {
        const response = await fetch(`${server.url}/proxy/models/main/v1/chat/completions`, {
          method: 'POST', headers: { ...admin(), 'content-type': 'application/json' }, body: '{"model": "echo", ',
        });
        expect(response.status).to.equal(400);
        const body = await response.json() as { error: Record<string, unknown> };
        expect(body.error).to.include({ type: 'invalid_request_error', param: null, code: null });
        expect(body.error.message).to.be.a('string');
        let error: unknown;
        await openai(memberToken).chat.completions.create({ model: 'nonesuch', messages: [{ role: 'user', content: 'hi' }] }).catch((caught: unknown) => { error = caught; });
        expect(error).to.be.instanceOf(NotFoundError);
        expect((error as NotFoundError).code).to.equal('model_not_found');
      });

      it('applies the service\'s auth to its model', async () => {
        let error: unknown;
        await openai(outsiderToken).chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }).catch((caught: unknown) => { error = caught; });
        expect((error as { status?: number }).status).to.equal(403);
        await openai('not-a-token').chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }).catch((caught: unknown) => { error = caught; });
        expect((error as { status?: number }).status).to.equal(401);
      });
    });
  });
}
