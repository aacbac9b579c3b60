import { expect } from 'chai';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join, resolve } from 'node:path';
import type { Run } from '../api/objects.js';
import type { WebhookDelivery, WebhookPayload } from '../api/webhooks.js';
import { startServer, type RunningServer, type ServerOptions } from '../server/server.js';
import { recordEvent } from '../store/events.js';
import { getProject } from '../store/projects.js';
import { endCliSuite, runCli, show, startLocalCliSuite, type CliResult, type LocalCliSuite } from './helpers/cli.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { freePort } from './helpers/ports.js';
import { eventually, LOCAL_CONFIG, pgliteTemplate } from './helpers/server.js';

const REPO = resolve(import.meta.dirname, '..');

interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  payload: WebhookPayload;
}

/** A receiver on loopback: records every POST, and answers as the path's handler says (200 when it has none). */
async function startReceiver() {
  const received: Received[] = [];
  const handlers = new Map<string, (count: number, res: ServerResponse) => void>();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const path = req.url ?? '/';
      received.push({ path, headers: req.headers, body, payload: JSON.parse(body) });
      const handler = handlers.get(path);
      if (handler) handler(received.filter((r) => r.path === path).length, res);
      else res.end('ok');
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    handlers,
    at: (path: string) => received.filter((r) => r.path === path),
    close: async () => {
      server.closeAllConnections();
      await new Promise((done) => server.close(done));
    },
  };
}

/** What a receiver does with the header, as docs/costs.md shows it: recompute the HMAC over "<t>.<body>" and compare in constant time. */
function signatureHolds(header: string | string[] | undefined, body: string, secret: string): boolean {
  const parts = Object.fromEntries(String(header).split(',').map((part) => part.split('=') as [string, string]));
  const expected = createHmac('sha256', secret).update(`${parts.t}.${body}`).digest();
  const given = Buffer.from(parts.v1 ?? '', 'hex');
  return given.length === expected.length && timingSafeEqual(given, expected) && Math.abs(Date.now() / 1000 - Number(parts.t)) < 300;
}

for (const kind of DATABASE_KINDS) {
  describe(`webhooks (${kind})`, function () {
    this.timeout(120_000);
    let suite: LocalCliSuite;
    let receiver: Awaited<ReturnType<typeof startReceiver>>;

    const cli = (args: string[]): Promise<CliResult> => runCli(args, { home: suite.home.home, cwd: REPO });
    const addHook = async (path: string, events: string): Promise<{ id: string; secret: string }> => {
      const added = await cli(['webhook', 'add', `${receiver.url}${path}`, '--events', events]);
      expect(added.code, show(added)).to.equal(0);
      const id = /^id: (\S+)$/m.exec(added.stdout)?.[1];
      const secret = /^secret: (\S+)$/m.exec(added.stdout)?.[1];
      expect(id, show(added)).to.be.a('string');
      expect(secret, show(added)).to.match(/^whsec_/);
      return { id: id!, secret: secret! };
    };
    const applyTask = async (name: string, command: string) => {
      const file = join(suite.work, `${name}.yml`);
      writeFileSync(file, `type: task\nname: ${name}\ncommands:\n  - ${command}\n`);
      const applied = await cli(['apply', '-f', file, '-y', '-d']);
      expect(applied.code, show(applied)).to.equal(0);
    };
    const runOf = async (name: string) => (await suite.server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
    const typesFor = (path: string, name: string) => receiver.at(path).filter((r) => r.payload.object.name === name).map((r) => r.payload.type);

    before(async function () {
      this.timeout(120_000);
      receiver = await startReceiver();
      suite = await startLocalCliSuite(kind, undefined, { webhookTimings: { firstRetryMs: 200, maxRetryMs: 400, timeoutMs: 60_000, settleMs: 1000 } });
    });
    after(async function () {
      this.timeout(120_000);
      await receiver?.close();
      await endCliSuite(suite?.server, suite?.home, suite?.work);
    });

    it('refuses a bad URL, an unreachable one, an unknown event pattern and a non-admin, storing nothing', async () => {
      const api = suite.server.api;
      const closed = await freePort();
      const cases: [unknown, number, RegExp][] = [
        [{ url: 'ftp://example.com/hook', events: ['run.*'] }, 400, /^url: expected http:\/\/ or https:\/\/, got ftp:\/\/$/],
        [{ url: 'not a url', events: ['run.*'] }, 400, /^url: "not a url" is not a URL/],
        [{ url: `http://user:pw@${receiver.url.slice('http://'.length)}/hook`, events: ['run.*'] }, 400, /^url: a user or password in the URL is not sent/],
        [{ url: receiver.url, events: ['run.exploded'] }, 400, /^events: unknown event pattern "run.exploded"; use an event type \(run.submitted, .*budget.exceeded\), a group \(run.\*, instance.\*, budget.\*\) or \*$/],
        [{ url: receiver.url, events: [] }, 400, /^events: expected a list of event patterns/],
        [{ url: `http://127.0.0.1:${closed}/hook`, events: ['run.*'] }, 422, new RegExp(`^url: cannot connect to 127.0.0.1:${closed} \\(ECONNREFUSED\\); nothing was stored$`)],
      ];
      for (const [body, status, message] of cases) {
        const answer = await api('POST', '/api/projects/main/webhooks', body);
        expect(answer.status, JSON.stringify(answer.body)).to.equal(status);
        expect(answer.body.error.message).to.match(message);
      }
      const user = await api('POST', '/api/users', { name: 'dev' });
      expect((await api('POST', '/api/projects/main/members', { user: 'dev', role: 'user' })).status).to.equal(201);
      const asMember = await api('POST', '/api/projects/main/webhooks', { url: receiver.url, events: ['*'] }, user.body.token);
      expect(asMember.status).to.equal(403);
      expect(asMember.body.error.message).to.equal('only an admin of project main or a global admin may do this');
      expect((await api('GET', '/api/projects/main/webhooks', undefined, user.body.token)).status).to.equal(403);

      const viaCli = await cli(['webhook', 'add', 'ftp://example.com/hook', '--events', 'run.*']);
      expect(viaCli.code).to.not.equal(0);
      expect(viaCli.stderr).to.include('url: expected http:// or https://, got ftp://');
      expect((await api('GET', '/api/projects/main/webhooks')).body).to.deep.equal([]);
    });

    it('signs each delivery with the secret shown once, and sends a run\'s events in order', async () => {
      const hook = await addHook('/signed', 'run.*');
      await applyTask('signed-task', 'echo hello');
      await eventually(async () => typesFor('/signed', 'signed-task').includes('run.done'), 30_000, 'run.done at the receiver');
      const deliveries = receiver.at('/signed').filter((r) => r.payload.object.name === 'signed-task');
      expect(deliveries.map((r) => r.payload.type)).to.deep.equal(['run.submitted', 'run.provisioning', 'run.running', 'run.done']);
      for (const delivery of deliveries) {
        expect(delivery.headers['x-orchestrator-signature']).to.match(/^t=\d+,v1=[0-9a-f]{64}$/);
        expect(signatureHolds(delivery.headers['x-orchestrator-signature'], delivery.body, hook.secret), delivery.body).to.equal(true);
        expect(signatureHolds(delivery.headers['x-orchestrator-signature'], delivery.body.replace('signed-task', 'signed-tasq'), hook.secret)).to.equal(false);
        expect(delivery.headers['x-orchestrator-event']).to.equal(delivery.payload.type);
        expect(delivery.payload).to.include({ project: 'main', reason: delivery.payload.type === 'run.done' ? 'Done' : delivery.payload.reason });
        expect(delivery.payload.object).to.deep.include({ kind: 'run', name: 'signed-task' });
      }
      const listed = await cli(['webhook', 'list', '--json']);
      const hooks = JSON.parse(listed.stdout) as Record<string, unknown>[];
      expect(hooks.find((h) => h.id === hook.id)).to.deep.include({ url: `${receiver.url}/signed`, events: ['run.*'] });
      expect(listed.stdout).to.not.include(hook.secret);
      const [stored] = await suite.server.db.query<{ sealed_secret: string }>('SELECT sealed_secret FROM webhooks WHERE id = $1', [hook.id]);
      expect(stored!.sealed_secret).to.match(/^v1:/).and.not.include(hook.secret.slice('whsec_'.length));
      const table = await cli(['webhook', 'list']);
      expect(table.stdout).to.match(new RegExp(`${hook.id}\\s+${receiver.url}/signed\\s+run\\.\\*`));
    });

    it('tries a receiver that answers 500 again with backoff: the fourth try delivers, and the deliveries list shows every try', async () => {
      receiver.handlers.set('/flaky', (count, res) => {
        res.statusCode = count <= 3 ? 500 : 200;
        res.end();
      });
      const hook = await addHook('/flaky', 'run.done');
      await applyTask('flaky-task', 'echo flaky');
      await eventually(async () => receiver.at('/flaky').length >= 4, 30_000, 'four tries');
      const tries = receiver.at('/flaky');
      expect(tries.map((t) => t.payload.type)).to.deep.equal(['run.done', 'run.done', 'run.done', 'run.done']);
      expect(new Set(tries.map((t) => t.body)).size).to.equal(1);
      expect(tries.every((t) => signatureHolds(t.headers['x-orchestrator-signature'], t.body, hook.secret))).to.equal(true);

      const delivered = await eventually(async () => {
        const listed = await cli(['webhook', 'deliveries', hook.id, '--json']);
        const [delivery] = JSON.parse(listed.stdout) as WebhookDelivery[];
        return delivery?.status === 'delivered' ? delivery : null;
      }, 10_000, 'the delivery to be recorded as delivered');
      expect(delivered.type).to.equal('run.done');
      expect(delivered.tries.map((t) => [t.attempt, t.statusCode])).to.deep.equal([[1, 500], [2, 500], [3, 500], [4, 200]]);
      expect(delivered.tries.every((t) => t.latencyMs >= 0 && t.error === null)).to.equal(true);
      const table = await cli(['webhook', 'deliveries', hook.id]);
      expect(table.code, show(table)).to.equal(0);
      expect(table.stdout).to.match(/^EVENT\s+TRY\s+AT\s+STATUS\s+LATENCY\s+DELIVERY\n/);
      expect(table.stdout).to.match(/run\.done #\d+\s+3\s+\S+ \S+\s+500\s+\d+ms\s*\n/);
      expect(table.stdout).to.match(/run\.done #\d+\s+4\s+\S+ \S+\s+200\s+\d+ms\s+delivered\n/);
      expect(receiver.at('/flaky')).to.have.length(4);
    });

    it('starts a run while a receiver hangs on its events', async () => {
      const hanging: ServerResponse[] = [];
      receiver.handlers.set('/hang', (_, res) => { hanging.push(res); });
      await addHook('/hang', 'run.*');
      await applyTask('hung-task', 'sleep 30');
      await eventually(async () => hanging.length > 0, 20_000, 'the receiver to hold the first delivery');
      const running = await eventually(async () => {
        const run = await runOf('hung-task');
        return run?.status === 'running' ? run : null;
      }, 30_000, 'hung-task to run');
      expect(running.status).to.equal('running');
      // The run.submitted delivery is still waiting for its answer (timeout 60s), the webhook's later events behind
      // it, and the run went on regardless.
      expect(typesFor('/hang', 'hung-task')).to.deep.equal(['run.submitted']);
      expect(hanging).to.have.length(1);
      expect(hanging[0]!.writableEnded).to.equal(false);
      expect((await cli(['stop', 'hung-task', '--abort'])).code).to.equal(0);
    });

    it('sends budget events of the project as budget.*, and nothing once the webhook is deleted', async () => {
      const hook = await addHook('/budget', 'budget.*');
      const project = (await getProject(suite.server.db, 'main'))!;
      await recordEvent(suite.server.db, { projectId: project.id, objectKind: 'project', objectId: project.id, objectName: 'main', reason: 'BudgetAlert', message: '80% of $500 this month' });
      await recordEvent(suite.server.db, { projectId: project.id, objectKind: 'project', objectId: project.id, objectName: 'main', reason: 'BudgetExceeded', message: '$500.12 of $500 this month' });
      await eventually(async () => receiver.at('/budget').length >= 2, 20_000, 'the budget events');
      expect(receiver.at('/budget').map((r) => [r.payload.type, r.payload.message])).to.deep.equal([
        ['budget.alert', '80% of $500 this month'], ['budget.exceeded', '$500.12 of $500 this month'],
      ]);

      const deleted = await cli(['webhook', 'delete', hook.id]);
      expect(deleted.code, show(deleted)).to.equal(0);
      await recordEvent(suite.server.db, { projectId: project.id, objectKind: 'project', objectId: project.id, objectName: 'main', reason: 'BudgetAlert', message: '100% of $500 this month' });
      const gone = await cli(['webhook', 'deliveries', hook.id]);
      expect(gone.code).to.not.equal(0);
      expect(gone.stderr).to.include(`webhook ${hook.id} not found in project main`);
      await new Promise((done) => setTimeout(done, 1500));
      expect(receiver.at('/budget')).to.have.length(2);
    });
  });
}

for (const kind of DATABASE_KINDS) {
  describe(`webhook deliveries across a server restart (${kind})`, function () {
    this.timeout(90_000);

    it('keeps a pending delivery through a restart and delivers it once; gives one up after its retry window', async () => {
      const receiver = await startReceiver();
      let up = false;
      receiver.handlers.set('/later', (_, res) => {
        res.statusCode = up ? 200 : 500;
        res.end();
      });
      receiver.handlers.set('/stall', () => { /* never answers */ });
      receiver.handlers.set('/never', (_, res) => {
        res.statusCode = 503;
        res.end();
      });
      const dir = mkdtempSync(join(tmpdir(), 'orch-webhooks-'));
      writeFileSync(join(dir, 'config.yml'), LOCAL_CONFIG);
      if (kind === 'pglite') cpSync(await pgliteTemplate(), join(dir, 'data'), { recursive: true });
      const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
      const options = (retryForMs: number): ServerOptions => ({
        port: 0, dir, databaseUrl: scratch?.url, adminToken: 'test-admin-token', logLevel: 'error', controllerIntervalMs: 200,
        webhookTimings: { firstRetryMs: 300, maxRetryMs: 300, timeoutMs: 60_000, settleMs: 1000, retryForMs },
      });
      const call = async (server: RunningServer, method: string, path: string, body?: unknown) => {
        const response = await fetch(`${server.url}${path}`, { method, headers: { authorization: 'Bearer test-admin-token', 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
        return { status: response.status, body: await response.json().catch(() => null) };
      };
      const budgetEvent = async (server: RunningServer, message: string) => {
        const project = (await getProject(server.db, 'main'))!;
        await recordEvent(server.db, { projectId: project.id, objectKind: 'project', objectId: project.id, objectName: 'main', reason: 'BudgetAlert', message });
      };
      let server = await startServer(options(60_000));
      try {
        const later = await call(server, 'POST', '/api/projects/main/webhooks', { url: `${receiver.url}/later`, events: ['budget.alert'] });
        expect(later.status, JSON.stringify(later.body)).to.equal(201);
        const stall = await call(server, 'POST', '/api/projects/main/webhooks', { url: `${receiver.url}/stall`, events: ['budget.alert'] });
        await budgetEvent(server, 'before the restart');
        await eventually(async () => receiver.at('/later').length >= 2 && receiver.at('/stall').length === 1, 20_000, 'two failed tries, and one that hangs');
        await server.close();
        const triesBefore = receiver.at('/later').length;
        up = true;
        server = await startServer(options(1500));
        const delivered = await eventually(async () => {
          const [delivery] = (await call(server, 'GET', `/api/projects/main/webhooks/${later.body.id}/deliveries`)).body as WebhookDelivery[];
          return delivery?.status === 'delivered' ? delivery : null;
        }, 20_000, 'the delivery after the restart');
        expect(delivered.tries.map((t) => t.statusCode)).to.deep.equal([...Array(triesBefore).fill(500), 200]);
        expect(receiver.at('/later').map((r) => r.payload.message)).to.deep.equal(Array(triesBefore + 1).fill('before the restart'));
        // Stopping did not wait for the receiver that hangs (timeout 60s): its try ended with the server.
        const [stalled] = (await call(server, 'GET', `/api/projects/main/webhooks/${stall.body.id}/deliveries`)).body as WebhookDelivery[];
        expect(stalled!.tries[0]).to.deep.include({ attempt: 1, statusCode: null, error: 'the server stopped before an answer' });

        const never = await call(server, 'POST', '/api/projects/main/webhooks', { url: `${receiver.url}/never`, events: ['budget.*'] });
        await budgetEvent(server, 'nobody hears this');
        const failed = await eventually(async () => {
          const [delivery] = (await call(server, 'GET', `/api/projects/main/webhooks/${never.body.id}/deliveries`)).body as WebhookDelivery[];
          return delivery?.status === 'failed' ? delivery : null;
        }, 20_000, 'the delivery to be given up');
        expect(failed.nextAttemptAt).to.equal(null);
        expect(failed.tries.length).to.be.at.least(2);
        expect(failed.tries.every((t) => t.statusCode === 503)).to.equal(true);
        await new Promise((done) => setTimeout(done, 1000));
        expect(receiver.at('/never')).to.have.length(failed.tries.length);
      } finally {
        await server.close().catch(() => undefined);
        await receiver.close();
        await scratch?.drop();
        rmSync(dir, { recursive: true, force: true });
      }
    });
  });
}

describe('webhooks with two servers on one Postgres database', function () {
  this.timeout(90_000);

  it('sends each event once, in order, whichever server queues and sends it', async () => {
    const receiver = await startReceiver();
    const database = await createScratchDatabase();
    const config = `${LOCAL_CONFIG}secrets:\n  key: ${randomBytes(32).toString('base64')}\n`;
    const dirs = [0, 1].map(() => mkdtempSync(join(tmpdir(), 'orch-webhooks-')));
    const servers: RunningServer[] = [];
    try {
      for (const dir of dirs) {
        writeFileSync(join(dir, 'config.yml'), config);
        servers.push(await startServer({ port: 0, dir, databaseUrl: database.url, adminToken: 'test-admin-token', logLevel: 'error', controllerIntervalMs: 50 }));
      }
      const added = await fetch(`${servers[1]!.url}/api/projects/main/webhooks`, {
        method: 'POST', headers: { authorization: 'Bearer test-admin-token', 'content-type': 'application/json' },
        body: JSON.stringify({ url: `${receiver.url}/both`, events: ['budget.*'] }),
      });
      const hook = await added.json() as { secret: string };
      expect(added.status, JSON.stringify(hook)).to.equal(201);
      const project = (await getProject(servers[0]!.db, 'main'))!;
      for (let n = 0; n < 20; n++) {
        await recordEvent(servers[n % 2]!.db, { projectId: project.id, objectKind: 'project', objectId: project.id, objectName: 'main', reason: 'BudgetAlert', message: `alert ${n}` });
      }
      await eventually(async () => receiver.at('/both').length >= 20, 30_000, 'twenty deliveries');
      await new Promise((done) => setTimeout(done, 1000));
      expect(receiver.at('/both').map((r) => r.payload.message)).to.deep.equal([...Array(20).keys()].map((n) => `alert ${n}`));
      expect(receiver.at('/both').every((r) => signatureHolds(r.headers['x-orchestrator-signature'], r.body, hook.secret))).to.equal(true);
    } finally {
      for (const server of servers) await server.close();
      await receiver.close();
      await database.drop();
      for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    }
  });
});
