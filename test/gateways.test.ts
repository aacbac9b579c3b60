import { expect } from 'chai';
import { request as httpRequest } from 'node:http';
import { Agent, request as httpsRequest } from 'node:https';
import type { TLSSocket } from 'node:tls';
import type { Gateway, GatewaySpec } from '../api/gateways.js';
import { parseSpecText } from '../api/parse.js';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { LocalBackend } from '../backends/local/local.js';
import { startServer, type RunningServer } from '../server/server.js';
import { addProject, makeHome, runCli } from './helpers/cli.js';
import { startPebble, type Pebble } from './helpers/pebble.js';
import { freePort } from './helpers/ports.js';
import { applyItems, echoLlm, runView, SERVICE_FLEET } from './helpers/services.js';
import { eventually, FAST_TIMINGS, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const DOMAIN = 'gw.test';
const EXAMPLE = join(import.meta.dirname, '..', 'examples', 'gateways', 'gateway.yml');
/** Pebble's certificates live this long, so that the gateway renews one (at a third of its life left) within the suite. */
const VALIDITY_SECONDS = 12;

const PLAIN_SERVICE = `
require('node:http').createServer((req, res) => res.end('plain ' + req.url)).listen(Number(process.env.PORT), '127.0.0.1');
`;

async function stopRestarted(server: RunningServer, dir: string): Promise<void> {
  await server.close();
  const local = new LocalBackend({ stateDir: join(dir, 'backends', 'local') });
  for (const instance of await local.list()) await local.terminate(instance.id);
  rmSync(dir, { recursive: true, force: true });
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: string;
  /** The SHA-256 fingerprint of the certificate the gateway presented (HTTPS only). */
  certificate?: string;
}

/**
 * The gateway process of the local backend against Debian's pebble: a certificate per service over HTTP-01, SNI,
 * redirects, authentication, rate limits, a server restart under it, a deleted service, and renewal.
 */
describe('gateways: services on a domain over HTTPS (pglite)', function () {
  this.timeout(60_000);
  let pebble: Pebble;
  let server: TestServer;
  let restarted: RunningServer | undefined;
  let httpPort: number;
  let httpsPort: number;
  const home = makeHome();
  const caFiles = process.env.NODE_EXTRA_CA_CERTS;
  const admin = () => ({ authorization: `Bearer ${server.adminToken}` });

  const overHttps = (host: string, path: string, headers: Record<string, string> = {}, agent: Agent | false = false) => new Promise<Answer>((resolve, reject) => {
    httpsRequest({ host: '127.0.0.1', port: httpsPort, path, servername: host, ca: pebble.root, agent, headers: { host: `${host}:${httpsPort}`, ...headers } }, (res) => {
      let body = '';
      const certificate = (res.socket as TLSSocket).getPeerCertificate().fingerprint256;
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk; }).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body, certificate }));
    }).on('error', reject).end();
  });
  const overHttp = (host: string, path: string, headers: Record<string, string> = {}) => new Promise<Answer>((resolve, reject) => {
    httpRequest({ host: '127.0.0.1', port: httpPort, path, agent: false, headers: { host: `${host}:${httpPort}`, ...headers } }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk; }).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    }).on('error', reject).end();
  });
  const postHttps = (host: string, path: string, body: unknown, headers: Record<string, string> = {}) => new Promise<Answer>((resolve, reject) => {
    const text = JSON.stringify(body);
    httpsRequest({
      method: 'POST', host: '127.0.0.1', port: httpsPort, path, servername: host, ca: pebble.root, agent: false,
      headers: { host: `${host}:${httpsPort}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers },
    }, (res) => {
      let answer = '';
      res.setEncoding('utf8').on('data', (chunk: string) => { answer += chunk; }).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: answer }));
    }).on('error', reject).end(text);
  });
  const gatewayOf = async (): Promise<Gateway> => (await server.api('GET', '/api/projects/main/gateways/main')).body as Gateway;
  const certificateOf = async (hostname: string) => (await gatewayOf()).certificates.find((c) => c.hostname === hostname);

  before(async () => {
    [httpPort, httpsPort] = await Promise.all([freePort(), freePort()]);
    pebble = await startPebble({ httpPort, validitySeconds: VALIDITY_SECONDS, blocked: [`plain.${DOMAIN}`] });
    // The gateway process, started by the server, trusts pebble's own HTTPS listener through it.
    process.env.NODE_EXTRA_CA_CERTS = pebble.caFile;
    server = await startTestServer('pglite', LOCAL_CONFIG);
    const echo = echoLlm({ rate_limits: [{ prefix: '/health', rps: 5, burst: 1 }], replicas: 1, scaling: undefined });
    // The example as written, on this suite's domain, ports and ACME server.
    const example = parseSpecText(readFileSync(EXAMPLE, 'utf8'), EXAMPLE, {});
    expect(example.errors).to.deep.equal([]);
    const gateway = example.specs[0] as GatewaySpec;
    await applyItems(server.url, server.adminToken,
      { spec: { ...gateway, domain: `*.${DOMAIN}`, public_ip: false, http_port: httpPort, https_port: httpsPort, certificate: { ...gateway.certificate, acme_server: pebble.directoryUrl } } },
      { spec: SERVICE_FLEET },
      echo,
      { spec: { type: 'service', name: 'plain', port: 8000, auth: false, files: ['server.cjs'], commands: ['node server.cjs'] }, files: [{ path: 'server.cjs', contentBase64: Buffer.from(PLAIN_SERVICE).toString('base64') }] });
    await addProject(home.home, server.url);
  });

  after(async () => {
    if (caFiles === undefined) delete process.env.NODE_EXTRA_CA_CERTS;
    else process.env.NODE_EXTRA_CA_CERTS = caFiles;
    await server?.api('DELETE', '/api/projects/main/gateways/main').catch(() => {});
    // The suite's last server is the restarted one, whose close the first server's stop would not reach.
    if (restarted) await stopRestarted(restarted, server.dir);
    else await server?.stop();
    await pebble?.stop();
    home.remove();
  });

  it('comes up, gets a certificate from the ACME server and serves the service over HTTPS, verified against its root', async () => {
    const hostname = `echo-llm.${DOMAIN}`;
    await eventually(async () => (await certificateOf(hostname))?.state === 'valid', 30_000, `a certificate for ${hostname}`);
    const answer = await eventually(async () => {
      const tried = await overHttps(hostname, '/v1/models', admin());
      return tried.status === 200 && tried;
    }, 20_000, 'the service over HTTPS');
    expect(JSON.parse(answer.body).data.map((m: { id: string }) => m.id)).to.deep.equal(['echo']);
    expect((await overHttps(hostname, '/v1/models')).status, 'the service\'s auth: true holds on the gateway').to.equal(401);
    const listed = await runCli(['gateway', 'list'], { home: home.home, env: { COLUMNS: '400' } });
    expect(listed.code, listed.stderr).to.equal(0);
    expect(listed.stdout).to.match(/main\s+\*\.gw\.test\s+yes\s+http:\/\/127\.0\.0\.1:\d+ https:\/\/127\.0\.0\.1:\d+\s+running/);
    expect(listed.stdout).to.match(/echo-llm\.gw\.test: valid until \d{4}-\d\d-\d\d/);
    expect((await runView(server.url, server.adminToken)).service!.gatewayUrl).to.equal(`https://${hostname}:${httpsPort}/`);
  });

  it('serves the models of the services it publishes at gateway.<domain>, over HTTPS with a certificate of its own', async () => {
    const hostname = `gateway.${DOMAIN}`;
    await eventually(async () => (await certificateOf(hostname))?.state === 'valid', 30_000, `a certificate for ${hostname}`);
    const listed = await eventually(async () => {
      const tried = await overHttps(hostname, '/v1/models', admin());
      return tried.status === 200 && tried;
    }, 20_000, 'the model list over HTTPS');
    expect(JSON.parse(listed.body).data.map((m: { id: string; owned_by: string }) => [m.id, m.owned_by])).to.deep.equal([['echo', 'main']]);
    expect(JSON.parse((await overHttps(hostname, '/models')).body).data, 'a model behind auth: true is listed to members only').to.deep.equal([]);
    const chat = await postHttps(hostname, '/v1/chat/completions', { model: 'echo', messages: [{ role: 'user', content: 'through the gateway' }] }, admin());
    expect(chat.status, chat.body).to.equal(200);
    expect(JSON.parse(chat.body).choices[0].message.content).to.equal('echo: through the gateway');
    const unknown = await postHttps(hostname, '/v1/chat/completions', { model: 'nonesuch', messages: [] }, admin());
    expect([unknown.status, JSON.parse(unknown.body).error.code]).to.deep.equal([404, 'model_not_found']);
    expect((await postHttps(hostname, '/v1/chat/completions', { model: 'echo', messages: [] })).status, 'the service\'s auth holds').to.equal(401);
    const plain = await overHttp(hostname, '/v1/models');
    expect([plain.status, plain.headers.location]).to.deep.equal([308, `https://${hostname}:${httpsPort}/v1/models`]);
    expect((await runView(server.url, server.adminToken)).service!.gatewayModelUrl).to.equal(`https://${hostname}:${httpsPort}/v1/`);
  });

  it('refuses at apply a service naming a gateway the project lacks, asking for HTTPS without one, or named gateway, a domain in use, and a backend the project lacks', async () => {
    const apply = (spec: Record<string, unknown>) => server.api('POST', '/api/projects/main/apply', { items: [{ spec }] });
    const service = { type: 'service', name: 'other', port: 8000, commands: ['true'] };
    const unknown = await apply({ ...service, gateway: 'nope' });
    expect([unknown.status, unknown.body.error.message]).to.deep.equal([422, 'nothing was applied: items[0]: gateway: project main has no gateway nope; gateways: main (apply one with type: gateway)']);
    const plainOnly = await apply({ ...service, gateway: false, https: true });
    expect(plainOnly.status).to.equal(422);
    expect(plainOnly.body.error.message).to.include('https: true needs a gateway, and gateway is false');
    const taken = await apply({ type: 'gateway', name: 'second', domain: `*.${DOMAIN}`, http_port: 18080, https_port: 18443 });
    expect([taken.status, taken.body.error.code]).to.deep.equal([409, 'domain_in_use']);
    const reserved = await apply({ ...service, name: 'gateway' });
    expect(reserved.status).to.equal(422);
    expect(reserved.body.error.message).to.include(`name: gateway.${DOMAIN} is gateway main's model endpoint, so a service it publishes cannot be named gateway`);
    const nowhere = await apply({ type: 'gateway', name: 'rented', domain: '*.rented.example', backend: 'gpucloud' });
    expect(nowhere.status).to.equal(422);
    expect(nowhere.body.error.message).to.include('backend: gpucloud is not configured for project main, so no instance can be rented to run gateway rented; configured: local');
    expect((await server.api('GET', '/api/projects/main/gateways')).body.map((g: { name: string }) => g.name)).to.deep.equal(['main']);
  });

  it('redirects HTTP to HTTPS, but answers ACME challenges on HTTP', async () => {
    const redirect = await overHttp(`echo-llm.${DOMAIN}`, '/v1/models?x=1');
    expect([redirect.status, redirect.headers.location]).to.deep.equal([308, `https://echo-llm.${DOMAIN}:${httpsPort}/v1/models?x=1`]);
    const challenge = await overHttp(`echo-llm.${DOMAIN}`, '/.well-known/acme-challenge/unknown-token');
    expect(challenge.status).to.equal(404);
    expect(JSON.parse(challenge.body).error.message).to.equal('no such ACME challenge');
  });

  it('leaves a service whose certificate the ACME server refused on HTTP, with the reason in gateway list', async () => {
    const hostname = `plain.${DOMAIN}`;
    const failed = await eventually(async () => {
      const certificate = await certificateOf(hostname);
      return certificate?.state === 'failed' && certificate;
    }, 20_000, `the refusal for ${hostname}`);
    expect(failed.error).to.match(/plain\.gw\.test/);
    const answer = await overHttp(hostname, '/hello');
    expect([answer.status, answer.body]).to.deep.equal([200, 'plain /hello']);
    const listed = await runCli(['gateway', 'list'], { home: home.home, env: { COLUMNS: '400' } });
    expect(listed.stdout).to.include(`${hostname}: failed, served over HTTP: `);
  });

  it('answers 429 with Retry-After past a rate limit, and lets requests through at the configured rate', async () => {
    const agent = new Agent({ keepAlive: true, maxSockets: 1, ca: pebble.root });
    const started = Date.now();
    const statuses: number[] = [];
    let retryAfter: string | string[] | undefined;
    while (Date.now() - started < 2000) {
      const answer = await overHttps(`echo-llm.${DOMAIN}`, '/health', admin(), agent);
      statuses.push(answer.status);
      if (answer.status === 429) retryAfter = answer.headers['retry-after'];
    }
    const seconds = (Date.now() - started) / 1000;
    agent.destroy();
    const passed = statuses.filter((status) => status === 200).length;
    expect(statuses.filter((status) => status !== 200 && status !== 429)).to.deep.equal([]);
    // A bucket of burst + 1 = 2 tokens, refilled at 5 a second.
    expect(passed).to.be.within(Math.floor(5 * seconds), Math.ceil(2 + 5 * seconds) + 1);
    expect(statuses.length - passed).to.be.greaterThan(10);
    expect(retryAfter).to.equal('1');
    expect((await overHttps(`echo-llm.${DOMAIN}`, '/v1/models', admin())).status, 'other paths are not limited').to.equal(200);
    // Only the gateway carried requests in this suite: what the server counts for autoscaling came from it.
    await eventually(async () => (await server.api('GET', '/api/projects/main/services/echo-llm/stats?window=60')).body.requests >= statuses.length, 5000, 'the gateway\'s request counts on the server');
  });

  it('renews a certificate before it expires without a failed request', async () => {
    const hostname = `echo-llm.${DOMAIN}`;
    const agent = new Agent({ keepAlive: true, maxSockets: 1, ca: pebble.root });
    const first = (await overHttps(hostname, '/v1/models', admin())).certificate;
    const failures: string[] = [];
    let renewed: string | undefined;
    const deadline = Date.now() + VALIDITY_SECONDS * 1000;
    while (!renewed && Date.now() < deadline) {
      // Fresh connections see the certificate of the moment; a kept-alive one goes on with the one it began with.
      for (const via of [false, agent] as const) {
        const answer = await overHttps(hostname, '/v1/models', admin(), via).catch((error: Error) => ({ status: 0, body: error.message, certificate: undefined }));
        if (answer.status !== 200) failures.push(`${answer.status} ${answer.body}`);
        if (via === false && answer.certificate !== first) renewed = answer.certificate;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    agent.destroy();
    expect(failures).to.deep.equal([]);
    expect(renewed, 'a new certificate within its predecessor\'s lifetime').to.be.a('string');
  });

  it('keeps routing from its last copy while the server is stopped, and the restarted server keeps the same process', async () => {
    const [{ process: before }] = await server.db.query<{ process: { pid: number } }>(`SELECT process FROM gateways WHERE name = 'main'`);
    const port = Number(new URL(server.url).port);
    await server.close();
    // Long enough for the gateway's polls of the server to fail a few times.
    for (let i = 0; i < 5; i++) {
      expect((await overHttps(`echo-llm.${DOMAIN}`, '/v1/models', admin())).status).to.equal(200);
      await new Promise((resolve) => setTimeout(resolve, 600));
    }
    restarted = await startServer({
      port, dir: server.dir, adminToken: server.adminToken, logLevel: 'error', instanceTimings: FAST_TIMINGS, controllerIntervalMs: 200,
    });
    server = { ...server, ...restarted };
    expect((await overHttps(`echo-llm.${DOMAIN}`, '/v1/models', admin())).status).to.equal(200);
    const seen = await eventually(async () => {
      const gateway = await gatewayOf();
      return gateway.status === 'running' && Date.parse(gateway.lastSeenAt!) > Date.now() - 2000 && gateway;
    }, 10_000, 'the gateway to call the restarted server');
    expect(seen.status).to.equal('running');
    const [{ process: after }] = await restarted.db.query<{ process: { pid: number } }>(`SELECT process FROM gateways WHERE name = 'main'`);
    expect(after.pid).to.equal(before.pid);
  });

  it('stops publishing a service that is stopped and deleted', async () => {
    expect((await server.api('POST', '/api/projects/main/runs/plain/stop', {})).status).to.equal(202);
    await eventually(async () => (await server.api('DELETE', '/api/projects/main/runs/plain')).status === 204, 20_000, 'the service to end');
    const gone = await eventually(async () => {
      const answer = await overHttp(`plain.${DOMAIN}`, '/hello');
      return answer.status === 404 && answer;
    }, 10_000, 'the gateway to drop the service');
    expect(JSON.parse(gone.body).error.message).to.equal(`no service is published at plain.${DOMAIN}:${httpPort}`);
    expect((await gatewayOf()).certificates.map((c) => c.hostname).sort()).to.deep.equal([`echo-llm.${DOMAIN}`, `gateway.${DOMAIN}`]);
  });
});
