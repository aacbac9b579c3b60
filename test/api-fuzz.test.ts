import { expect } from 'chai';
import fc from 'fast-check';
import { DATABASE_KINDS } from './helpers/databases.js';
import { LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const segment = fc.oneof(
  fc.constantFrom('main', 'nope', 'local', 'hello', '', '..', '%00', 'a'.repeat(300), '%E0%A4%A', '💥'),
  fc.string({ maxLength: 12 }).map(encodeURIComponent),
);

const path = fc.oneof(
  fc.tuple(fc.constantFrom(
    '/api/projects/:p', '/api/projects/:p/fleets', '/api/projects/:p/fleets/plan', '/api/projects/:p/fleets/apply',
    '/api/projects/:p/fleets/:n', '/api/projects/:p/runs', '/api/projects/:p/runs/plan', '/api/projects/:p/runs/apply',
    '/api/projects/:p/runs/:n', '/api/projects/:p/runs/:n/stop', '/api/projects/:p/runs/:n/logs', '/api/projects/:p/runs/:n/metrics',
    '/api/projects/:p/offers', '/api/projects/:p/instances', '/api/projects/:p/events', '/api/projects/:p/members', '/api/users',
    '/api/server/info', '/api/projects', '/api', '/nowhere',
  ), segment, segment).map(([template, p, n]) => template.replace(':p', p).replace(':n', n)),
  fc.webPath(),
);

const query = fc.dictionary(fc.constantFrom('after', 'follow', 'all', 'backend', 'gpu', 'object'), fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom('-1', '1e9', 'true', 'H100:8', 'NaN')), { maxKeys: 3 })
  .map((q) => new URLSearchParams(q).toString());

const specLike = fc.record({
  type: fc.oneof(fc.constantFrom('task', 'fleet', 'service', 'dev-environment', 'nonsense'), fc.anything()),
  name: fc.oneof(fc.constantFrom('hello', 'Bad_Name', ''), fc.anything()),
  commands: fc.oneof(fc.array(fc.oneof(fc.string(), fc.constant('echo \u0000')), { maxLength: 3 }), fc.anything()),
  working_dir: fc.oneof(fc.constantFrom('/abs', '../..', 'a\u0000b'), fc.anything()),
  nodes: fc.oneof(fc.constantFrom('0..1', '2..1', 'x'), fc.integer(), fc.anything()),
  resources: fc.oneof(fc.record({ gpu: fc.oneof(fc.constantFrom('H100:2', 'H10', '24GB..', '1..0'), fc.anything()) }), fc.anything()),
  port: fc.oneof(fc.integer(), fc.anything()),
  env: fc.anything(),
}, { requiredKeys: [] });

const fileLike = fc.record({
  path: fc.oneof(fc.constantFrom('a', '', '../../x', 'a/../../x', '/etc/x', 'a\u0000b'), fc.anything()),
  contentBase64: fc.oneof(fc.constantFrom('', 'eA==', 'eA=', 'not base64!'), fc.anything()),
  mode: fc.oneof(fc.constantFrom(0o644, 0o4755, 0o10000, -1), fc.anything()),
  owner: fc.anything(),
}, { requiredKeys: [] });

const body = fc.oneof(
  fc.constant(undefined),
  fc.record({ spec: fc.oneof(specLike, fc.anything()), files: fc.oneof(fc.array(fileLike, { maxLength: 3 }), fc.anything()), abort: fc.anything(), name: fc.anything(), user: fc.anything() }, { requiredKeys: [] }).map((b) => JSON.stringify(b)),
  fc.jsonValue().map((v) => JSON.stringify(v)),
  fc.string({ maxLength: 40 }),
);

for (const kind of DATABASE_KINDS) {
  describe(`management API under random requests on ${kind}`, function () {
    this.timeout(120_000);
    let server: TestServer;
    before(async () => { server = await startTestServer(kind, LOCAL_CONFIG); });
    after(async () => { await server.stop(); });

    it('never answers 5xx to anything a client can send, and always in the one error shape', async () => {
      await fc.assert(fc.asyncProperty(
        fc.constantFrom('GET', 'POST', 'DELETE', 'PUT', 'PATCH'), path, query,
        fc.oneof(fc.constant(`Bearer ${server.adminToken}`), fc.constant('Bearer wrong'), fc.constant(''), fc.string({ maxLength: 20 })),
        body,
        async (method, p, q, authorization, payload) => {
          const response = await fetch(`${server.url}${p}${q && !q.includes('follow') ? `?${q}` : ''}`, {
            method,
            headers: { ...(authorization ? { authorization } : {}), 'content-type': 'application/json' },
            body: method === 'GET' ? undefined : payload,
          });
          const text = await response.text();
          expect(response.status, `${method} ${p} ${payload} → ${text}`).to.be.lessThan(500);
          if (response.status >= 400) expect(JSON.parse(text).error).to.have.keys(text.includes('"details"') ? ['code', 'message', 'details'] : ['code', 'message']);
        }), { numRuns: 300 });
    });

    it('answers 401 without a valid token, 404 for an unknown project or run, 403 outside a project, 409 and 422 for conflicts and bad specs', async () => {
      expect((await server.api('GET', '/api/projects/main/runs', undefined, 'nope')).status).to.equal(401);
      expect((await server.api('GET', '/api/projects/unknown/runs')).status).to.equal(404);
      expect((await server.api('GET', '/api/projects/main/runs/unknown')).status).to.equal(404);
      const { body: outsider } = await server.api('POST', '/api/users', { name: 'outsider' });
      expect((await server.api('GET', '/api/projects/main/runs', undefined, outsider.token)).status).to.equal(403);
      const bad = await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', commands: ['true'], resources: { gpu: 'H10' } } });
      expect(bad.status).to.equal(422);
      expect(bad.body.error.message).to.include('did you mean "H100"');
      expect((await server.api('POST', '/api/users', { name: 'outsider' })).status).to.equal(409);
    });

    it('refuses a NUL character anywhere in a spec with a 422 naming the field, and stores nothing', async () => {
      const task = { type: 'task', commands: ['true'] };
      const cases: [string, Record<string, unknown>, string[]][] = [
        ['runs', { ...task, env: { A: 'x\u0000y' } }, ['env.A']],
        ['runs', { ...task, env: ['A=x\u0000y'] }, ['env[0]']],
        ['runs', { ...task, env: { 'A\u0000': 'x' } }, ['env["A\\u0000"]']],
        ['runs', { ...task, commands: ['true', 'echo \u0000'] }, ['commands[1]']],
        ['runs', { ...task, name: 'a\u0000' }, ['name']],
        ['runs', { ...task, working_dir: 'a\u0000', files: ['x\u0000:y'] }, ['working_dir', 'files[0]']],
        ['runs', { ...task, resources: { gpu: { name: ['H100\u0000'] } } }, ['resources.gpu.name[0]']],
        ['runs', { ...task, unknown: [{ deeper: ['\u0000'] }] }, ['unknown[0].deeper[0]']],
        ['fleets', { type: 'fleet', name: 'f\u0000', nodes: 1 }, ['name']],
      ];
      for (const [kind, spec, paths] of cases) {
        for (const route of ['plan', 'apply']) {
          const answer = await server.api('POST', `/api/projects/main/${kind}/${route}`, { spec });
          expect(answer.status, `${route} ${JSON.stringify(spec)}`).to.equal(422);
          expect(answer.body.error.details.map((d: { path: string }) => d.path), JSON.stringify(spec)).to.deep.equal(paths);
          expect(answer.body.error.message).to.include('contains a NUL character');
        }
      }
      expect((await server.api('GET', '/api/projects/main/runs?all=true')).body).to.deep.equal([]);
      expect((await server.api('GET', '/api/projects/main/fleets?all=true')).body).to.deep.equal([]);
    });

    it('answers 4xx to out-of-range cursors and NUL characters in user names', async () => {
      for (const after of ['2147483647', '2147483648', '99999999999', '99999999999999999999']) {
        expect((await server.api('GET', `/api/projects/main/events?after=${after}`)).body, after).to.deep.equal([]);
      }
      for (const after of ['1e308', '-1', '1.5', 'abc', '']) {
        expect((await server.api('GET', `/api/projects/main/events?after=${after}`)).status, after).to.equal(400);
      }
      expect((await server.api('POST', '/api/projects/main/members', { user: 'a\u0000' })).status).to.equal(400);
      expect((await server.api('POST', '/api/users', { name: 'a\u0000' })).status).to.equal(400);
    });

    it('answers 400 to a body nested 10 000 levels deep, wherever the nesting is, and keeps serving', async () => {
      const arrays = `${'['.repeat(10_000)}${']'.repeat(10_000)}`;
      const objects = `${'{"a":'.repeat(10_000)}1${'}'.repeat(10_000)}`;
      const bodies = [
        objects,
        `{"spec":${objects}}`,
        `{"spec":{"type":"task","commands":["true"],"env":${arrays}}}`,
        `{"spec":{"type":"task","commands":["true"]},"files":${arrays}}`,
        `{"spec":{"type":"task","commands":["true"]},"other":${arrays}}`,
      ];
      for (const path of ['/api/projects/main/runs/apply', '/api/projects/main/runs/plan', '/api/projects/main/fleets/apply', '/api/users']) {
        for (const payload of bodies) {
          const response = await fetch(`${server.url}${path}`, {
            method: 'POST', headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' }, body: payload,
          });
          expect(response.status, `${path} ${payload.slice(0, 60)}`).to.equal(400);
          expect(await response.json()).to.deep.equal({ error: { code: 'bad_request', message: 'the body nests arrays and objects more than 64 levels deep' } });
        }
      }
      const fine = await server.api('POST', '/api/projects/main/runs/plan', { spec: { type: 'task', commands: ['echo "[[[{{{"'] } });
      expect(fine.status).to.equal(200);
    });
  });
}
