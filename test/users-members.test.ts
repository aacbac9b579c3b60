import { expect } from 'chai';
import { createHash } from 'node:crypto';
import type Router from '@koa/router';
import { createApp } from '../server/app.js';
import type { ServerContext } from '../server/context.js';
import { addProject, makeHome, runCli, show, type CliResult } from './helpers/cli.js';
import { DATABASE_KINDS, ONE_DATABASE } from './helpers/databases.js';
import { startTestServer, type TestServer } from './helpers/server.js';

const TWO_PROJECTS = `projects:
- name: main
  backends:
  - type: local
    runtime: process
- name: research
  backends:
  - type: local
    runtime: process
`;

/** Every route of every router the app serves, so that a route added later is part of the matrix too. */
function everyRoute(): Array<{ method: string; path: string }> {
  const context = { db: {}, pool: {}, logger: {}, version: 'test' } as unknown as ServerContext;
  const routers = createApp(context).middleware
    .map((middleware) => (middleware as { router?: Router }).router)
    .filter((router): router is Router => router !== undefined);
  return [...new Set(routers)].flatMap((router) => router.stack
    .filter((layer) => layer.methods.length > 0)
    .flatMap((layer) => layer.methods.filter((m) => m !== 'HEAD').map((method) => ({ method, path: String(layer.path) }))));
}

const CALLERS = ['anonymous', 'bad token', 'outsider', 'member', 'project admin', 'admin'] as const;
type Caller = typeof CALLERS[number];

const ANY_USER: Caller[] = ['outsider', 'member', 'project admin', 'admin'];
const MEMBERS: Caller[] = ['member', 'project admin', 'admin'];
const PROJECT_ADMINS: Caller[] = ['project admin', 'admin'];
const ADMINS: Caller[] = ['admin'];

/** Who may call each route; every other route is under a project and open to its members. */
const ALLOWED: Record<string, Caller[]> = {
  'GET /api/server/info': ANY_USER,
  'GET /api/projects': ANY_USER,
  'GET /api/users': ADMINS,
  'POST /api/users': ADMINS,
  'DELETE /api/users/:name': ADMINS,
  'POST /api/users/:name/rotate-token': ADMINS,
  'GET /api/users/me/ssh-keys': ANY_USER,
  'PUT /api/users/me/ssh-keys': ANY_USER,
  'DELETE /api/users/me/ssh-keys/:fingerprint': ANY_USER,
  'GET /metrics': ADMINS,
  'POST /api/session': ANY_USER,
  'GET /api/session': ANY_USER,
  'DELETE /api/session': ANY_USER,
  'GET /api/projects/:project/members': MEMBERS,
  'POST /api/projects/:project/members': PROJECT_ADMINS,
  'DELETE /api/projects/:project/members/:user': PROJECT_ADMINS,
  'PUT /api/projects/:project/budget': PROJECT_ADMINS,
  'DELETE /api/projects/:project/budget': PROJECT_ADMINS,
  'GET /api/projects/:project/secrets/:name': PROJECT_ADMINS,
  'PUT /api/projects/:project/secrets/:name': PROJECT_ADMINS,
  'DELETE /api/projects/:project/secrets/:name': PROJECT_ADMINS,
  'GET /api/projects/:project/webhooks': PROJECT_ADMINS,
  'POST /api/projects/:project/webhooks': PROJECT_ADMINS,
  'DELETE /api/projects/:project/webhooks/:id': PROJECT_ADMINS,
  'GET /api/projects/:project/webhooks/:id/deliveries': PROJECT_ADMINS,
};

/** Routes that gateway processes call with their own token: no user's token opens them, whatever the user's role. */
const GATEWAY_ROUTES = /^\/api\/gateway\//;
/** The console's sign-in takes a token in its body, not its header: for anyone, `{}` is a bad request. */
const SIGN_IN = 'POST /api/session';

function allowedCallers(method: string, path: string): Caller[] {
  if (GATEWAY_ROUTES.test(path)) return [];
  const listed = ALLOWED[`${method} ${path}`];
  if (listed) return listed;
  expect(path, `${method} ${path}: say who may call it in ALLOWED`).to.match(/^\/api\/projects\/:project(\/|$)/);
  return MEMBERS;
}

const SHA256 = (text: string) => createHash('sha256').update(text).digest('hex');
const tokenIn = (result: CliResult) => /--token (\S+)/.exec(result.stdout)?.[1] ?? '';
const occurrences = (text: string, part: string) => text.split(part).length - 1;

for (const kind of DATABASE_KINDS) {
  describe(`users, tokens and project members on ${kind}`, function () {
    this.timeout(90_000);
    let server: TestServer;
    const tokens = {} as Record<Caller, string>;

    const newUser = async (name: string, admin = false): Promise<string> => {
      const created = await server.api('POST', '/api/users', { name, admin });
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      return created.body.token as string;
    };
    const rotated = async (name: string): Promise<string> => (await server.api('POST', `/api/users/${name}/rotate-token`)).body.token;
    const join = async (user: string, role: 'admin' | 'user', project = 'main') => {
      const added = await server.api('POST', `/api/projects/${project}/members`, { user, role });
      expect(added.status, JSON.stringify(added.body)).to.equal(201);
    };

    before(async () => {
      server = await startTestServer(kind, TWO_PROJECTS);
      tokens.anonymous = '';
      tokens['bad token'] = 'not-a-token-of-anyone';
      tokens.outsider = await newUser('outsider');
      tokens.member = await newUser('member');
      tokens['project admin'] = await newUser('lead');
      tokens.admin = server.adminToken;
      await join('member', 'user');
      await join('lead', 'admin');
    });
    after(async () => { await server?.stop(); });

    it('answers every route by the caller\'s role: 401 without a valid token, 403 for the wrong role, neither for the right one', async () => {
      await newUser('target');
      const routes = everyRoute();
      expect(routes.map((r) => `${r.method} ${r.path}`)).to.include.members(Object.keys(ALLOWED));
      for (const { method, path } of routes) {
        const allowed = allowedCallers(method, path);
        const filled = path
          .replace(':project', 'main')
          .replace(/:\w+/g, (param) => (param === ':user' || path.startsWith('/api/users') ? 'target' : 'nothing-here'));
        for (const caller of CALLERS) {
          const response = await fetch(`${server.url}${filled}`, {
            method,
            headers: { 'content-type': 'application/json', ...(tokens[caller] ? { authorization: `Bearer ${tokens[caller]}` } : {}) },
            body: method === 'GET' ? undefined : '{}',
          });
          // A live stream never ends: its status and headers are the answer.
          const streaming = response.headers.get('content-type')?.startsWith('text/event-stream');
          const text = streaming ? (await response.body!.cancel(), '') : await response.text();
          const where = `${method} ${filled} as ${caller}: ${response.status} ${text}`;
          if (`${method} ${path}` === SIGN_IN) expect(response.status, where).to.equal(400);
          else if (caller === 'anonymous' || caller === 'bad token' || GATEWAY_ROUTES.test(path)) expect(response.status, where).to.equal(401);
          else if (allowed.includes(caller)) expect(response.status, where).to.be.within(200, 499).and.not.oneOf([401, 403]);
          else expect(response.status, where).to.equal(403);
          if (response.status >= 400) expect(Object.keys(JSON.parse(text).error), where).to.include.members(['code', 'message']);
        }
      }
    });

    it('lets a project admin manage the members of its own project only, and lists users without secrets', async () => {
      const lead = tokens['project admin'];
      await newUser('carol');
      expect((await server.api('POST', '/api/projects/main/members', { user: 'carol' }, lead)).status).to.equal(201);
      expect((await server.api('GET', '/api/projects/main/members', undefined, tokens.member)).body).to.deep.include({ user: 'carol', role: 'user' });
      expect((await server.api('POST', '/api/projects/research/members', { user: 'carol' }, lead)).status).to.equal(403);
      expect((await server.api('DELETE', '/api/projects/main/members/carol', undefined, tokens.member)).status).to.equal(403);
      expect((await server.api('DELETE', '/api/projects/main/members/carol', undefined, lead)).status).to.equal(204);
      expect((await server.api('GET', '/api/projects/main/runs', undefined, await rotated('carol'))).status).to.equal(403);

      const users = await server.api('GET', '/api/users');
      expect(users.body.map((u: { name: string }) => u.name)).to.include.members(['admin', 'carol', 'lead', 'member', 'outsider']);
      for (const user of users.body) expect(user).to.have.all.keys('name', 'admin', 'createdAt');
      const text = JSON.stringify(users.body);
      for (const token of Object.values(tokens).filter(Boolean)) {
        expect(text).not.to.include(token);
        expect(text).not.to.include(SHA256(token));
      }
    });

    it('stops a rotated token and a deleted user\'s token at once; the deleted user\'s runs keep its name and the name is free again', async () => {
      const old = await newUser('dave');
      await join('dave', 'user');
      const own = await server.api('POST', '/api/users/dave/rotate-token', undefined, old);
      expect(own.status).to.equal(200);
      expect(own.body).to.include({ name: 'dave', admin: false });
      expect((await server.api('GET', '/api/projects/main/runs', undefined, old)).status).to.equal(401);
      const current = own.body.token as string;
      expect(current).to.have.length.of.at.least(43);
      expect((await server.api('GET', '/api/projects/main/runs', undefined, current)).status).to.equal(200);

      const run = await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'daves-task', commands: ['true'] } }, current);
      expect(run.status, JSON.stringify(run.body)).to.equal(201);
      expect((await server.api('DELETE', '/api/users/dave')).status).to.equal(204);
      const refused = await server.api('GET', '/api/projects/main/runs', undefined, current);
      expect(refused.status).to.equal(401);
      expect(refused.body.error.code).to.equal('unauthorized');
      expect((await server.api('GET', '/api/projects/main/runs/daves-task')).body.user).to.equal('dave');
      expect((await server.api('GET', '/api/projects/main/members')).body.map((m: { user: string }) => m.user)).not.to.include('dave');
      expect((await server.api('DELETE', '/api/users/dave')).status).to.equal(404);

      const again = await newUser('dave');
      expect((await server.api('GET', '/api/projects/main/runs', undefined, again)).status).to.equal(403);
      expect((await server.api('GET', '/api/projects/main/runs', undefined, current)).status).to.equal(401);
    });

    it('answers mistakes with 400, 404 and 409 in the one error shape', async () => {
      const cases: Array<[string, string, unknown, number, string]> = [
        ['POST', '/api/users', { name: 'Bad_Name' }, 400, 'name: expected a lowercase letter'],
        ['POST', '/api/users', { name: 'a'.repeat(64) }, 400, 'name:'],
        ['POST', '/api/users', { name: 'erin', admin: 'yes' }, 400, 'admin: expected true or false'],
        ['POST', '/api/users', { name: 'member' }, 409, 'user member already exists'],
        ['DELETE', '/api/users/nobody', undefined, 404, 'user nobody not found'],
        ['DELETE', '/api/users/NOBODY', undefined, 400, 'user name:'],
        ['DELETE', '/api/users/admin', undefined, 409, 'server\'s own admin'],
        ['POST', '/api/users/nobody/rotate-token', undefined, 404, 'user nobody not found'],
        ['POST', '/api/users/admin/rotate-token', undefined, 409, 'ORCHESTRATOR_SERVER_ADMIN_TOKEN'],
        ['POST', '/api/projects/main/members', { user: 'nobody' }, 404, 'user nobody not found'],
        ['POST', '/api/projects/main/members', { user: 'member' }, 409, 'already a member of project main as user'],
        ['POST', '/api/projects/main/members', { user: 'member', role: 'owner' }, 400, 'role: expected "admin" or "user"'],
        ['POST', '/api/projects/nowhere/members', { user: 'member' }, 404, 'project nowhere not found'],
        ['DELETE', '/api/projects/main/members/outsider', undefined, 404, 'outsider is not a member of project main'],
        ['DELETE', '/api/projects/main/members/a%00b', undefined, 400, 'user name:'],
      ];
      for (const [method, path, body, status, message] of cases) {
        const answer = await server.api(method, path, body);
        expect(answer.status, `${method} ${path} ${JSON.stringify(body)}`).to.equal(status);
        expect(answer.body.error.message).to.include(message);
      }
      const secondAdmin = await newUser('root', true);
      const self = await server.api('DELETE', '/api/users/root', undefined, secondAdmin);
      expect([self.status, self.body.error.message]).to.deep.equal([409, 'you cannot delete yourself; another admin can']);
      const roleChange = await server.api('POST', '/api/projects/main/members', { user: 'member', role: 'user' });
      expect([roleChange.status, roleChange.body]).to.deep.equal([200, { user: 'member', role: 'user' }]);
    });
  });
}

for (const kind of ONE_DATABASE) {
  describe(`orchestrator user and member on ${kind}`, function () {
    this.timeout(90_000);
    let server: TestServer;
    let admin: ReturnType<typeof makeHome>;
    let alice: ReturnType<typeof makeHome>;
    const as = (home: ReturnType<typeof makeHome>) => (args: string[]) => runCli(args, { home: home.home });
    const ok = (result: CliResult) => {
      expect(result.code, show(result)).to.equal(0);
      return result;
    };
    const failed = (result: CliResult, message: string) => {
      expect(result.code, show(result)).to.equal(1);
      expect(result.stderr).to.include(message);
      expect(result.stderr, 'no stack trace').not.to.match(/\n\s+at /);
    };

    before(async () => {
      server = await startTestServer(kind, TWO_PROJECTS);
      admin = makeHome();
      alice = makeHome();
      await addProject(admin.home, server.url);
      await addProject(admin.home, server.url, server.adminToken, 'research');
    });
    after(async () => {
      await server?.stop();
      admin?.remove();
      alice?.remove();
    });

    it('creates a user, prints its token once with the command that uses it, and lists users without tokens', async () => {
      const cli = as(admin);
      const created = ok(await cli(['user', 'create', 'alice']));
      const token = tokenIn(created);
      expect(token, 'a token that starts with "-" would be read as an option by project add --token').to.match(/^[0-9a-f]{64}$/);
      expect(occurrences(created.stdout + created.stderr, token)).to.equal(1);
      expect(created.stdout).to.include(`orchestrator project add --name main --url ${server.url} --token ${token}`);
      expect(created.stdout).to.include('orchestrator member add alice');

      failed(await as(alice)(['project', 'add', '--name', 'main', '--url', server.url, '--token', token]), 'you are not a member of project main');
      ok(await cli(['member', 'add', 'alice']));
      ok(await as(alice)(['project', 'add', '--name', 'main', '--url', server.url, '--token', token]));
      ok(await as(alice)(['ps']));

      const bob = ok(await cli(['user', 'create', 'bob', '--admin']));
      expect(bob.stdout).to.include('user bob created (admin)');
      const list = ok(await cli(['user', 'list']));
      expect(list.stdout).to.match(/^USER\s+ADMIN\s+CREATED$/m);
      expect(list.stdout).to.match(/^bob\s+yes\s+\d{4}-/m);
      expect(list.stdout).to.match(/^alice\s+\d{4}-/m);
      const json = ok(await cli(['user', 'list', '--json'])).stdout;
      const users = JSON.parse(json) as Array<Record<string, unknown>>;
      expect(users.map((u) => u.name)).to.deep.equal(['admin', 'alice', 'bob']);
      for (const user of users) expect(user).to.have.all.keys('name', 'admin', 'createdAt');
      for (const secret of [token, tokenIn(bob), server.adminToken]) {
        expect(json).not.to.include(secret);
        expect(json).not.to.include(SHA256(secret));
      }
      failed(await cli(['user', 'create', 'alice']), 'user alice already exists');
      failed(await cli(['user', 'create', 'Alice']), 'name: expected a lowercase letter');
      failed(await cli(['user', 'rename', 'alice']), 'unknown user action "rename"');
      failed(await cli(['user', 'delete']), 'give the user: orchestrator user delete NAME');
      failed(await as(alice)(['user', 'list']), 'only an admin may do this');
    });

    it('adds, changes and removes members of the current project or of --project', async () => {
      const cli = as(admin);
      expect(ok(await cli(['member', 'list'])).stdout).to.match(/^alice\s+user$/m);
      failed(await cli(['member', 'add', 'alice']), 'alice is already a member of project main as user');
      expect(ok(await cli(['member', 'add', 'alice', '--role', 'admin'])).stdout).to.equal('alice is a member of project main as admin\n');
      failed(await cli(['member', 'add', 'alice', '--role', 'owner']), 'unknown role "owner"');
      expect(JSON.parse(ok(await cli(['member', 'list', '--json'])).stdout)).to.deep.equal([{ user: 'alice', role: 'admin' }]);

      expect(ok(await cli(['member', 'list', '--project', 'research'])).stdout).to.include('project research has no members');
      ok(await as(alice)(['member', 'add', 'bob']));
      failed(await as(alice)(['member', 'list', '--project', 'research']), 'project research is not configured');
      ok(await cli(['member', 'add', 'alice', '--project', 'research']));
      expect(JSON.parse(ok(await cli(['member', 'list', '--project', 'research', '--json'])).stdout)).to.deep.equal([{ user: 'alice', role: 'user' }]);
      ok(await cli(['member', 'remove', 'alice', '--project', 'research']));
      failed(await cli(['member', 'remove', 'alice', '--project', 'research']), 'alice is not a member of project research');
      expect(ok(await cli(['member', 'remove', 'bob'])).stdout).to.equal('bob is no longer a member of project main\n');
    });

    it('rotates a token: the old one stops working, and a user rotating its own keeps working', async () => {
      const byAdmin = ok(await as(admin)(['user', 'rotate-token', 'alice']));
      const token = tokenIn(byAdmin);
      expect(occurrences(byAdmin.stdout + byAdmin.stderr, token)).to.equal(1);
      failed(await as(alice)(['ps']), 'refused the token of project main');
      ok(await as(alice)(['project', 'add', '--name', 'main', '--url', server.url, '--token', token]));

      const own = ok(await as(alice)(['user', 'rotate-token', 'alice']));
      const newest = tokenIn(own);
      expect(newest).not.to.equal(token);
      expect(occurrences(own.stdout + own.stderr, newest)).to.equal(1);
      expect(own.stderr).to.include('now uses the new token for main');
      ok(await as(alice)(['ps']));
      expect((await server.api('GET', '/api/projects/main/runs', undefined, token)).status).to.equal(401);
      failed(await as(alice)(['user', 'rotate-token', 'bob']), 'only an admin or the user themselves may do this');
    });

    it('deletes a user after confirmation; its token stops working at once; the server\'s admin cannot be deleted', async () => {
      const cli = as(admin);
      failed(await cli(['user', 'delete', 'alice']), 'pass -y');
      ok(await as(alice)(['ps']));
      expect(ok(await cli(['user', 'delete', 'alice', '-y'])).stdout).to.include('user alice deleted');
      failed(await as(alice)(['ps']), 'refused the token of project main');
      failed(await cli(['user', 'delete', 'alice', '-y']), 'user alice not found');
      failed(await cli(['user', 'delete', 'admin', '-y']), 'server\'s own admin');
      expect(JSON.parse(ok(await cli(['user', 'list', '--json'])).stdout).map((u: { name: string }) => u.name)).to.deep.equal(['admin', 'bob']);
    });
  });
}
