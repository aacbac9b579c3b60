import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Run } from '../api/objects.js';
import { LocalBackend } from '../backends/local/local.js';
import { ACCESS_CACHE_TTL_MS } from '../gateway/access-cache.js';
import { startServer, type RunningServer } from '../server/server.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { eventually, FAST_TIMINGS, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const UPSTREAM = `
import { createServer } from 'node:http';
createServer((req, res) => res.end('hello')).listen(Number(process.env.PORT), '127.0.0.1');
`;
const ITEMS = [
  { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } },
  {
    spec: { type: 'service', name: 'app', port: 8000, files: ['server.mjs'], commands: ['node server.mjs'], probes: [{ type: 'http', url: '/', interval: '1s' }] },
    files: [{ path: 'server.mjs', contentBase64: Buffer.from(UPSTREAM).toString('base64') }],
  },
];

async function call(url: string, token: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${url}${path}`, {
    method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** Deploys the service through `url` and waits for its replica; returns a way to call it with a token. */
async function deploy(url: string, admin: string): Promise<void> {
  const applied = await call(url, admin, 'POST', '/api/projects/main/apply', { items: ITEMS });
  expect(applied.status, JSON.stringify(applied.body)).to.equal(201);
  await eventually(async () => {
    const run = (await call(url, admin, 'GET', '/api/projects/main/runs/app')).body as Run;
    return run.service?.replicas.some((replica) => replica.state === 'ready');
  }, 90_000, 'the service to be ready');
}

async function proxied(url: string, token: string): Promise<number> {
  const response = await fetch(`${url}/proxy/services/main/app/`, { headers: { authorization: `Bearer ${token}` } });
  await response.arrayBuffer();
  return response.status;
}

/** A new member of project main; returns its token. */
async function member(url: string, admin: string, name: string): Promise<string> {
  const created = await call(url, admin, 'POST', '/api/users', { name });
  expect(created.status, JSON.stringify(created.body)).to.equal(201);
  expect((await call(url, admin, 'POST', '/api/projects/main/members', { user: name })).status).to.equal(201);
  return created.body.token as string;
}

for (const kind of DATABASE_KINDS) {
  describe(`gateway: access changes reach the proxy at once (${kind})`, function () {
    this.timeout(120_000);
    let server: TestServer;
    const admin = 'test-admin-token';

    before(async function () {
      this.timeout(120_000);
      server = await startTestServer(kind, LOCAL_CONFIG);
      await deploy(server.url, admin);
    });
    after(async function () {
      this.timeout(60_000);
      await server?.stop();
    });

    it('refuses a deleted user with 401 on the request right after the deletion', async () => {
      const token = await member(server.url, admin, 'alice');
      expect(await proxied(server.url, token)).to.equal(200);
      expect(await proxied(server.url, token), 'admitted again, from what the gateway remembers').to.equal(200);
      expect((await call(server.url, admin, 'DELETE', '/api/users/alice')).status).to.equal(204);
      expect(await proxied(server.url, token)).to.equal(401);
    });

    it('refuses a removed member with 403 at once, and admits them again as soon as they are added back', async () => {
      const token = await member(server.url, admin, 'bob');
      expect(await proxied(server.url, token)).to.equal(200);
      expect((await call(server.url, admin, 'DELETE', '/api/projects/main/members/bob')).status).to.equal(204);
      expect(await proxied(server.url, token)).to.equal(403);
      expect((await call(server.url, admin, 'POST', '/api/projects/main/members', { user: 'bob' })).status).to.equal(201);
      expect(await proxied(server.url, token)).to.equal(200);
    });

    it('refuses a rotated token at once and admits the new one', async () => {
      const old = await member(server.url, admin, 'carol');
      expect(await proxied(server.url, old)).to.equal(200);
      const rotated = await call(server.url, admin, 'POST', '/api/users/carol/rotate-token');
      expect(rotated.status).to.equal(200);
      expect(await proxied(server.url, old)).to.equal(401);
      expect(await proxied(server.url, rotated.body.token)).to.equal(200);
    });
  });
}

describe('gateway: access changes on one server reach another on the same Postgres database', function () {
  this.timeout(120_000);
  const servers: RunningServer[] = [];
  const dirs: string[] = [];
  let database: { url: string; drop(): Promise<void> };
  const admin = 'shared-admin';

  before(async function () {
    this.timeout(120_000);
    database = await createScratchDatabase();
    for (let i = 0; i < 2; i++) {
      const dir = mkdtempSync(join(tmpdir(), 'orch-auth-cache-'));
      writeFileSync(join(dir, 'config.yml'), LOCAL_CONFIG);
      dirs.push(dir);
      servers.push(await startServer({ port: 0, dir, databaseUrl: database.url, adminToken: admin, logLevel: 'error', instanceTimings: FAST_TIMINGS, controllerIntervalMs: 200 }));
    }
    await deploy(servers[0]!.url, admin);
  });
  after(async function () {
    this.timeout(60_000);
    for (const server of servers) await server.close();
    for (const dir of dirs) {
      const local = new LocalBackend({ stateDir: join(dir, 'backends', 'local') });
      for (const instance of await local.list().catch(() => [])) await local.terminate(instance.id);
      rmSync(dir, { recursive: true, force: true });
    }
    await database?.drop();
  });

  it('refuses a member removed through the other server sooner than the cache would forget by itself', async () => {
    const [first, second] = servers.map((server) => server.url) as [string, string];
    const token = await member(first, admin, 'dave');
    expect(await proxied(second, token)).to.equal(200);
    expect((await call(first, admin, 'DELETE', '/api/projects/main/members/dave')).status).to.equal(204);
    // Within half the cache's lifetime: only the NOTIFY can have told the second server.
    await eventually(async () => await proxied(second, token) === 403, ACCESS_CACHE_TTL_MS / 2, 'the second server to refuse the removed member');
    expect((await call(first, admin, 'DELETE', '/api/users/dave')).status).to.equal(204);
    await eventually(async () => await proxied(second, token) === 401, ACCESS_CACHE_TTL_MS / 2, 'the second server to refuse the deleted user');
  });
});
