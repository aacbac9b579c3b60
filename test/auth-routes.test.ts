import { expect } from 'chai';
import type Router from '@koa/router';
import type { ServerContext } from '../server/context.js';
import { applyRoutes } from '../server/routes/apply.js';
import { costRoutes } from '../server/routes/costs.js';
import { fleetRoutes } from '../server/routes/fleets.js';
import { liveRoutes } from '../server/routes/live.js';
import { logRoutes } from '../server/routes/logs.js';
import { metricsRoutes } from '../server/routes/metrics.js';
import { projectRoutes } from '../server/routes/project.js';
import { runMetricsRoutes } from '../server/routes/run-metrics.js';
import { runRoutes } from '../server/routes/runs.js';
import { secretRoutes } from '../server/routes/secrets.js';
import { serviceRoutes } from '../server/routes/services.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

/** Every route the management API serves, read from its routers so that a new route cannot be left out. */
function everyRoute(): Array<{ method: string; path: string }> {
  const context = { db: {}, pool: {}, logger: {}, version: 'test' } as unknown as ServerContext;
  const routers: Router[] = [projectRoutes(context), applyRoutes(context), fleetRoutes(context), runRoutes(context), runMetricsRoutes(context), logRoutes(context),
    serviceRoutes(context), metricsRoutes(context), secretRoutes(context), liveRoutes(context), costRoutes(context)];
  return routers.flatMap((router) => router.stack
    .filter((layer) => layer.methods.length > 0)
    .flatMap((layer) => layer.methods.filter((m) => m !== 'HEAD').map((method) => ({
      method,
      path: String(layer.path),
    }))));
}

/** The route's path in lower, upper and mixed case, with an existing project and run name filled in. */
const spellings = (template: string) => [
  template,
  template.toUpperCase(),
  template.replace(/[a-z]/g, (c, i: number) => (i % 2 === 0 ? c.toUpperCase() : c)),
].map((path) => path.replace(/:project/i, 'main').replace(/:name/i, 'some-run'));

for (const kind of DATABASE_KINDS) {
  describe(`authentication of every route on ${kind}`, function () {
    this.timeout(60_000);
    let server: TestServer;
    before(async () => { server = await startTestServer(kind, LOCAL_CONFIG); });
    after(async () => { await server.stop(); });

    it('answers 401 in the error shape for every route, in any letter case, without a token', async () => {
      const routes = everyRoute();
      expect(routes.length).to.be.greaterThan(15);
      for (const { method, path } of routes) {
        for (const spelled of spellings(path)) {
          for (const headers of [{}, { authorization: 'Bearer wrong-token' }, { authorization: 'Basic abc' }] as Array<Record<string, string>>) {
            const response = await fetch(`${server.url}${spelled}`, { method, headers: { 'content-type': 'application/json', ...headers }, body: method === 'GET' ? undefined : '{}' });
            const body = await response.json() as { error: { code: string } };
            expect(response.status, `${method} ${spelled} ${JSON.stringify(headers)}`).to.equal(401);
            expect(body.error.code).to.equal('unauthorized');
          }
        }
      }
    });

    it('gives an anonymous caller no hint of which projects exist', async () => {
      const existing = await fetch(`${server.url}/API/projects/main`);
      const missing = await fetch(`${server.url}/API/projects/no-such-project`);
      expect(existing.headers.get('content-type')).to.match(/json/);
      expect([existing.status, missing.status]).to.deep.equal([401, 401]);
      expect(await existing.text()).to.equal(await missing.text());
    });

    it('checks membership the same way in any letter case', async () => {
      const { body: user } = await server.api('POST', '/api/users', { name: 'outsider' });
      for (const spelled of spellings('/api/projects/:project/runs')) {
        const response = await fetch(`${server.url}${spelled}`, { headers: { authorization: `Bearer ${user.token}` } });
        expect(response.status, spelled).to.equal(403);
      }
      const mine = await fetch(`${server.url}/API/PROJECTS`, { headers: { authorization: `Bearer ${user.token}` } });
      expect(await mine.json()).to.deep.equal([]);
    });
  });
}
