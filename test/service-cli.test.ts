import { expect } from 'chai';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import OpenAI from 'openai';
import WebSocket from 'ws';
import type { AgentMetrics } from '../api/agent.js';
import type { Run } from '../api/objects.js';
import type { Replica, ServiceStats, ServiceStatsSeries } from '../api/services.js';
import { psRows } from '../cli/commands/ps.js';
import { replicaLine, serviceAddresses } from '../cli/service-progress.js';
import { renderTable } from '../cli/table.js';
import { recordServiceSeconds } from '../store/service-stats.js';
import { addProject, endCliSuite, makeHome, runCli, show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { IDLE_SERVICE, latencies, thisSecond } from './helpers/service-stats.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const REPO = resolve(import.meta.dirname, '..');

function replica(overrides: Partial<Replica>): Replica {
  return { replica: 0, group: null, generation: 2, state: 'ready', statusMessage: 'running on local-0', instance: 'local-0', startedAt: null, readyAt: null, ...overrides };
}

function serviceRun(replicas: Replica[]): Run {
  return {
    id: 'r1', project: 'main', user: 'admin', name: 'echo-llm', kind: 'service', status: 'running', statusMessage: '2 of 3 replicas ready',
    terminationReason: null, priority: 0, generation: 2, attempt: 1, spec: { type: 'service', name: 'echo-llm', port: 8000 }, fleet: null, instance: null,
    gpu: null, pricePerHour: null, cost: 0, exitCode: null, queuePosition: null, submittedAt: new Date(Date.now() - 65_000).toISOString(),
    startedAt: null, finishedAt: null, inactivityStopAt: null,
    service: { desiredReplicas: 3, replicas, stableGeneration: 1, stall: null, path: '/proxy/services/main/echo-llm/', model: 'echo', modelPath: '/proxy/models/main/v1/', gatewayUrl: null, gatewayModelUrl: null },
    ssh: null,
  };
}

describe('how the CLI shows a service', () => {
  const replicas = [
    replica({ replica: 0 }),
    replica({ replica: 1, generation: 1, state: 'draining', instance: 'local-1', statusMessage: 'replaced by generation 2' }),
    replica({ replica: 2, state: 'provisioning', instance: null, statusMessage: 'waiting: fleet local is at its maximum of 2 nodes: 2 busy' }),
  ];

  it('ps lists each replica under its service, with the ready and desired counts and the requests per second', () => {
    const stats = { run: 'echo-llm', requestsPerSecond: 2.345 } as ServiceStats;
    const table = renderTable(['name', 'kind', 'status', 'gpu', '$/h', 'cost', 'submitted', 'message'], psRows([serviceRun(replicas)], new Map([['echo-llm', stats]])), 200);
    const lines = table.split('\n');
    expect(lines[1]).to.match(/^echo-llm\s+service\s+running \(1\/3 ready, 2\.35 req\/s\)\s+-\s+-\s+-\s+1m ago\s+2 of 3 replicas ready$/);
    expect(lines[2]).to.match(/^ {2}replica 0\s+ready\s+-\s+-\s+-\s+running on local-0$/);
    expect(lines[3]).to.match(/^ {2}replica 1\s+draining \(gen 1\)\s+-\s+-\s+-\s+on local-1: replaced by generation 2$/);
    expect(lines[4]).to.match(/^ {2}replica 2\s+provisioning\s+-\s+-\s+-\s+waiting: fleet local is at its maximum of 2 nodes: 2 busy$/);
  });

  it('ps leaves the requests out when the server gave none, and shows a task as before', () => {
    const task: Run = { ...serviceRun([]), name: 'train', kind: 'task', service: null, status: 'failed', exitCode: 3, instance: 'local-0' };
    const rows = psRows([serviceRun([]), task], new Map());
    expect(rows[0]![2]).to.equal('running (0/3 ready)');
    expect(rows[1]!.slice(0, 3)).to.deep.equal(['train', 'task', 'failed (3)']);
    expect(rows).to.have.length(2);
  });

  it('apply names each replica\'s state and instance, and where the service and its model are reached', () => {
    expect(replicas.map(replicaLine)).to.deep.equal([
      'replica 0: ready on local-0',
      'replica 1: draining on local-1',
      'replica 2: provisioning: waiting: fleet local is at its maximum of 2 nodes: 2 busy',
    ]);
    expect(serviceAddresses('http://127.0.0.1:3000', serviceRun(replicas).service!)).to.equal([
      'Service:  http://127.0.0.1:3000/proxy/services/main/echo-llm/',
      'Model:    http://127.0.0.1:3000/proxy/models/main/v1/   (model: echo, OpenAI-compatible)',
      '',
    ].join('\n'));
    const withoutModel = { ...serviceRun(replicas).service!, model: null, modelPath: null };
    expect(serviceAddresses('http://h:1', withoutModel)).to.equal('Service:  http://h:1/proxy/services/main/echo-llm/\n');
  });
});

for (const kind of DATABASE_KINDS) {
  describe(`service statistics through the API and the CLI (${kind})`, function () {
    this.timeout(90_000);
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    let work: string;
    const cli = (args: string[]) => runCli(args, { home: home.home, cwd: work });
    const stats = (query = '', token?: string) => server.api('GET', `/api/projects/main/services/svc/stats${query}`, undefined, token);

    before(async function () {
      this.timeout(120_000);
      server = await startTestServer(kind, LOCAL_CONFIG);
      home = makeHome();
      work = mkdtempSync(join(tmpdir(), 'orch-service-cli-'));
      await addProject(home.home, server.url);
      writeFileSync(join(work, 'svc.yml'), `${Object.entries(IDLE_SERVICE).map(([key, value]) => `${key}: ${JSON.stringify(value)}`).join('\n')}\n`);
      const applied = await cli(['apply', '-f', 'svc.yml', '-y', '-d']);
      expect(applied.code, show(applied)).to.equal(0);
      expect(applied.stdout).to.equal('svc\n');
      const run = (await server.api('GET', '/api/projects/main/runs/svc')).body as Run;
      // Seconds of a while ago: nothing is in flight now.
      const recently = thisSecond() - 10_000;
      await recordServiceSeconds(server.db, 'gateway-a', [
        { runId: run.id, second: new Date(recently), requests: 20, errors: 3, inflight: 3, latency: latencies(17, 3) },
        { runId: run.id, second: new Date(recently - 120_000), requests: 600, errors: 0, inflight: 9, latency: latencies(600, 0) },
      ]);
      // A second gateway process: its counts add up with the first's.
      await recordServiceSeconds(server.db, 'gateway-b', [{ runId: run.id, second: new Date(recently), requests: 10, errors: 0, inflight: 1, latency: latencies(10, 0) }]);
    });
    after(async function () {
      this.timeout(60_000);
      await endCliSuite(server, home, work);
    });

    it('sums every gateway\'s seconds over the window, five minutes unless asked', async () => {
      const { status, body } = await stats();
      expect(status, JSON.stringify(body)).to.equal(200);
      expect(body).to.deep.equal({
        run: 'svc', windowSeconds: 300, requests: 630, requestsPerSecond: 2.1, errors: 3, errorRate: 3 / 630,
        p50Ms: 10, p99Ms: 10, inflight: 9, inflightNow: 0, readyReplicas: 0, desiredReplicas: 0,
      });
      const lastMinute = await stats('?window=60');
      expect(lastMinute.body).to.include({ windowSeconds: 60, requests: 30, requestsPerSecond: 0.5, errors: 3, errorRate: 0.1, p50Ms: 10, p99Ms: 500, inflight: 4, inflightNow: 0 });
    });

    it('answers every live service\'s figures in one call, as each service\'s own route does, and ps shows each one\'s rate from it', async () => {
      const all = await server.api('GET', '/api/projects/main/services/stats?window=60');
      expect(all.status, JSON.stringify(all.body)).to.equal(200);
      expect(all.body).to.deep.equal([(await stats('?window=60')).body]);
      const outsider = (await server.api('POST', '/api/users', { name: 'outsider-all' })).body;
      expect((await server.api('GET', '/api/projects/main/services/stats', undefined, outsider.token)).status).to.equal(403);
      const listed = await cli(['ps']);
      expect(listed.code, show(listed)).to.equal(0);
      expect(listed.stdout).to.match(/^svc\s+service\s+\S+ \(0\/\d+ ready, 0\.5 req\/s\)/m);
    });

    it('gives the figures step by step over the window, for the console\'s charts, steps without requests included', async () => {
      const { status, body } = await server.api('GET', '/api/projects/main/services/svc/stats/series?window=300&step=10');
      expect(status, JSON.stringify(body)).to.equal(200);
      expect(body).to.include({ run: 'svc', windowSeconds: 300, stepSeconds: 10 });
      const points = body.points as ServiceStatsSeries['points'];
      expect(points).to.have.length(30);
      expect(points.every((point, i) => i === 0 || Date.parse(point.at) - Date.parse(points[i - 1]!.at) === 10_000)).to.equal(true);
      expect(points.reduce((sum, point) => sum + point.requests, 0)).to.equal(630);
      const busy = points.filter((point) => point.requests > 0);
      expect(busy).to.have.length(2);
      expect(busy[0]).to.deep.include({ requests: 600, requestsPerSecond: 60, errors: 0, errorRate: 0, p50Ms: 10, p99Ms: 10 });
      expect(busy[1]).to.deep.include({ requests: 30, requestsPerSecond: 3, errors: 3, errorRate: 0.1, p50Ms: 10, p99Ms: 500 });
      expect(points.find((point) => point.requests === 0)).to.deep.include({ requestsPerSecond: 0, errorRate: 0, p50Ms: null, p99Ms: null });
      expect((await server.api('GET', '/api/projects/main/services/svc/stats/series')).body.points, 'five minutes in 60 steps unless asked').to.have.length(60);

      for (const query of ['?step=0', '?step=301', '?window=3600&step=1', '?step=5s']) {
        const refused = await server.api('GET', `/api/projects/main/services/svc/stats/series${query}`);
        expect(refused.status, query).to.equal(400);
        expect(refused.body.error.message, query).to.match(/^step: expected a whole number of seconds from \d+ to the window's \d+/);
      }
    });

    it('counts the requests in flight now apart from the most in flight during the window', async () => {
      const run = (await server.api('GET', '/api/projects/main/runs/svc')).body as Run;
      // A second in which two requests stayed in flight and none arrived, as the gateway writes it.
      await recordServiceSeconds(server.db, 'gateway-c', [{ runId: run.id, second: new Date(thisSecond()), requests: 0, errors: 0, inflight: 2, latency: latencies(0, 0) }]);
      const { body } = await stats();
      expect(body).to.include({ requests: 630, inflight: 9, inflightNow: 2 });
      await server.db.query(`DELETE FROM service_stats WHERE source = 'gateway-c'`);
    });

    it('refuses a window outside 10 s to an hour, a run that is not a service, an unknown run and a non-member', async () => {
      for (const window of ['5', '3601', 'abc', '1m', '']) {
        const { status, body } = await stats(`?window=${window}`);
        expect(status, window).to.equal(400);
        expect(body.error.message).to.contain('window: expected a whole number of seconds from 10 to 3600');
      }
      expect((await stats('?window=60&window=120')).status).to.equal(400);
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'job', commands: ['true'] }, files: [] });
      const task = await server.api('GET', '/api/projects/main/services/job/stats');
      expect(task.status).to.equal(409);
      expect(task.body.error).to.include({ code: 'not_a_service', message: 'run job is a task, not a service; only services have request statistics' });
      const unknown = await server.api('GET', '/api/projects/main/services/nothing/stats');
      expect(unknown.status).to.equal(404);
      expect(unknown.body.error.message).to.equal('run nothing not found in project main');
      const { body: outsider } = await server.api('POST', '/api/users', { name: 'outsider' });
      expect((await stats('', outsider.token)).status).to.equal(403);
    });

    it('service stats prints the figures, or the API\'s object with --json', async () => {
      const table = await cli(['service', 'stats', 'svc']);
      expect(table.code, show(table)).to.equal(0);
      const [header, row] = table.stdout.split('\n');
      expect(header).to.match(/^RUN\s+WINDOW\s+REQUESTS\s+REQ\/S\s+P50\s+P99\s+ERRORS\s+IN FLIGHT \(PEAK\)\s+REPLICAS$/);
      expect(row, 'an idle service has nothing in flight').to.match(/^svc\s+5m\s+630\s+2\.1\s+10ms\s+10ms\s+0\.5% \(3\)\s+0 \(9\)\s+0\/0 ready$/);

      const json = await cli(['service', 'stats', 'svc', '--window', '1m', '--json']);
      expect(json.code, show(json)).to.equal(0);
      expect(JSON.parse(json.stdout)).to.include({ run: 'svc', windowSeconds: 60, requests: 30, p99Ms: 500, errorRate: 0.1 });
    });

    it('service stats says what is wrong with the window, the run or the action', async () => {
      const cases: Array<[string[], string]> = [
        [['service', 'stats', 'svc', '--window', '2h'], 'error: --window: expected from 10s to 1h (the server keeps an hour of statistics), got 2h\n'],
        [['service', 'stats', 'svc', '--window', 'soon'], 'error: --window: invalid duration "soon"'],
        [['service', 'stats', 'job'], 'error: run job is a task, not a service; only services have request statistics\n'],
        [['service', 'stats'], 'error: give the service: orchestrator service stats RUN\n'],
        [['service', 'scale', 'svc'], 'error: unknown service action "scale"; use service stats RUN, service rollback RUN\n'],
      ];
      for (const [args, message] of cases) {
        const result = await cli(args);
        expect(result.code, show(result)).to.equal(1);
        expect(result.stderr).to.satisfy((text: string) => text.startsWith(message), show(result));
      }
    });

    it('service rollback refuses a service never ready, a run that is not a service, and a non-member, saying why', async () => {
      const never = await cli(['service', 'rollback', 'svc']);
      expect(never.code, show(never)).to.equal(1);
      expect(never.stderr).to.equal('error: no generation of svc has been ready yet; there is nothing to roll back to\n');
      expect((await cli(['service', 'rollback'])).stderr).to.equal('error: give the service: orchestrator service rollback RUN\n');
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'job', commands: ['true'] }, files: [] });
      const task = await server.api('POST', '/api/projects/main/services/job/rollback', {});
      expect(task.status).to.equal(409);
      expect(task.body.error).to.include({ code: 'not_a_service', message: 'run job is a task, not a service; only services roll back' });
      const { body: outsider } = await server.api('POST', '/api/users', { name: 'stranger' });
      expect((await server.api('POST', '/api/projects/main/services/svc/rollback', {}, outsider.token)).status).to.equal(403);
      expect((await server.api('GET', '/api/projects/main/runs/svc')).body.generation).to.equal(1);
    });

    it('apply exits 1 with the service\'s status message when it ends before a replica is ready', async () => {
      writeFileSync(join(work, 'h100.yml'), 'type: fleet\nname: h100\nbackends: [local]\nnodes: 0..1\nresources: {gpu: H100}\n');
      expect((await cli(['apply', '-f', 'h100.yml', '-y'])).code).to.equal(0);
      writeFileSync(join(work, 'gpu-svc.yml'), 'type: service\nname: gpu-svc\nport: 8000\ncommands: [sleep 600]\nresources: {gpu: H100}\n');
      // No offer of this machine has an H100: --queue submits it anyway, and it fails at once.
      const result = await cli(['apply', '-f', 'gpu-svc.yml', '-y', '--queue']);
      expect(result.code, show(result)).to.equal(1);
      expect(result.stdout).to.equal('');
      expect(result.stderr).to.match(/^error: gpu-svc failed: replica 0 cannot be placed: /m);
    });

    it('apply publishes a service without replicas at once, saying that none runs', async () => {
      writeFileSync(join(work, 'zero.yml'), 'type: service\nname: zero\nport: 8000\ncommands: [sleep 600]\nreplicas: 0\n');
      const result = await cli(['apply', '-f', 'zero.yml', '-y']);
      expect(result.code, show(result)).to.equal(0);
      expect(result.stderr).to.contain('zero has no replica running; replicas: 0 starts none\n');
      expect(result.stdout).to.equal(`Service:  ${server.url}/proxy/services/main/zero/\n`);
    });

    it('ps shows the service with its ready and desired replicas and its requests of the last minute', async () => {
      const ps = await cli(['ps']);
      expect(ps.code, show(ps)).to.equal(0);
      expect(ps.stdout).to.match(/^svc\s+service\s+[a-z]+ \(0\/0 ready, 0\.5 req\/s\)/m);
    });
  });
}

describe('orchestrator apply of a service on the local backend', function () {
  this.timeout(180_000);
  let server: TestServer;
  let home: ReturnType<typeof makeHome>;
  const cli = (args: string[]) => runCli(args, { home: home.home, cwd: REPO, timeoutMs: 150_000 });

  before(async function () {
    this.timeout(120_000);
    server = await startTestServer('pglite', LOCAL_CONFIG);
    home = makeHome();
    await addProject(home.home, server.url);
    const fleet = await cli(['apply', '-f', 'examples/fleets/local.yml', '-y']);
    expect(fleet.code, show(fleet)).to.equal(0);
  });
  after(async function () {
    this.timeout(60_000);
    await endCliSuite(server, home);
  });

  it('follows the replicas until one is ready, then prints where the service and its model are reached', async () => {
    const result = await cli(['apply', '-f', 'examples/services/echo-llm.yml', '-y']);
    expect(result.code, show(result)).to.equal(0);
    expect(result.stderr).to.contain('service echo-llm: create');
    expect(result.stderr).to.match(/^replica 0: provisioning/m);
    expect(result.stderr).to.match(/^replica 0: ready on local-0$/m);
    expect(result.stdout).to.equal([
      `Service:  ${server.url}/proxy/services/main/echo-llm/`,
      `Model:    ${server.url}/proxy/models/main/v1/   (model: echo, OpenAI-compatible)`,
      '',
    ].join('\n'));

    const ps = await cli(['ps']);
    expect(ps.stdout).to.match(/^echo-llm\s+service\s+running \(1\/1 ready, 0 req\/s\)/m);
    expect(ps.stdout).to.match(/^ {2}replica 0\s+ready\s/m);
  });

  it('counts the requests that reach the service through the proxy in service stats', async () => {
    for (let i = 0; i < 3; i++) {
      const response = await fetch(`${server.url}/proxy/services/main/echo-llm/health`, { headers: { authorization: `Bearer ${server.adminToken}` } });
      expect(response.status).to.equal(200);
    }
    const stats = await eventually(async () => {
      const result = await cli(['service', 'stats', 'echo-llm', '--json']);
      const figures = JSON.parse(result.stdout) as ServiceStats;
      return figures.requests === 3 ? figures : null;
    }, 10_000, 'three requests in the statistics');
    expect(stats).to.include({ errors: 0, readyReplicas: 1 });
    expect(stats.p50Ms).to.be.a('number');
  });

  it('metrics shows the use of each running replica of the service, or of the one asked for', async () => {
    const every = await cli(['metrics', 'echo-llm']);
    expect(every.code, show(every)).to.equal(0);
    expect(every.stdout).to.match(/^replica 0 \(ready, on local-0\)\nCPU\s+MEMORY\n\d+%\s+\S+ \/ \S+\n/);
    const listed = JSON.parse((await cli(['metrics', 'echo-llm', '--json'])).stdout) as Array<{ replica: number; metrics: AgentMetrics }>;
    expect(listed.map((part) => part.replica)).to.deep.equal([0]);
    expect(listed[0]!.metrics.memoryTotalMib).to.be.greaterThan(0);
    const one = await cli(['metrics', 'echo-llm', '--replica', '0', '--json']);
    expect(one.code, show(one)).to.equal(0);
    expect((JSON.parse(one.stdout) as AgentMetrics).memoryTotalMib).to.be.greaterThan(0);
    const missing = await cli(['metrics', 'echo-llm', '--replica', '5']);
    expect(missing.code).to.equal(1);
    expect(missing.stderr).to.equal('error: service echo-llm has no replica 5\n');
    const unpicked = await server.api('GET', '/api/projects/main/runs/echo-llm/metrics');
    expect(unpicked.status).to.equal(409);
    expect(unpicked.body.error).to.deep.include({ code: 'replica_needed', message: 'run echo-llm is a service: metrics are each replica\'s; ask for one with replica=N (running: 0)' });
  });

  it('answers a member\'s curl and the official openai client, whole and streamed token by token', async () => {
    const created = await cli(['user', 'create', 'alice', '--json']);
    expect(created.code, show(created)).to.equal(0);
    const { token } = JSON.parse(created.stdout) as { token: string };
    const denied = await fetch(`${server.url}/proxy/services/main/echo-llm/v1/models`, { headers: { authorization: `Bearer ${token}` } });
    expect(denied.status).to.equal(403);
    expect((await cli(['member', 'add', 'alice'])).code).to.equal(0);

    const body = JSON.stringify({ model: 'echo', messages: [{ role: 'user', content: 'hello there' }] });
    const curl = await promisify(execFile)('curl', ['-sS', '--fail-with-body', '-H', `Authorization: Bearer ${token}`, '-H', 'Content-Type: application/json',
      '-d', body, `${server.url}/proxy/services/main/echo-llm/v1/chat/completions`]);
    expect(JSON.parse(curl.stdout).choices[0].message.content).to.equal('echo: hello there');

    // The base URL apply prints on its Model: line.
    const openai = new OpenAI({ baseURL: `${server.url}/proxy/models/main/v1/`, apiKey: token });
    const whole = await openai.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'one two three' }] });
    expect(whole.choices[0]!.message.content).to.equal('echo: one two three');
    const pieces: string[] = [];
    for await (const chunk of await openai.chat.completions.create({ model: 'echo', messages: [{ role: 'user', content: 'one two three' }], stream: true })) {
      const piece = chunk.choices[0]?.delta.content;
      if (piece) pieces.push(piece);
    }
    expect(pieces.length).to.be.greaterThan(2);
    expect(pieces.join('')).to.equal('echo: one two three');

    const root = await fetch(`${server.url}/proxy/models/main/`, { headers: { authorization: `Bearer ${token}` } });
    expect(root.status).to.equal(404);
    expect((await root.json() as { error: { message: string } }).error.message)
      .to.equal('name a route after the model endpoint\'s base: it serves v1/models, v1/chat/completions, v1/completions and v1/embeddings');
  });

  it('publishes the WebSocket echo service and carries messages both ways', async () => {
    const applied = await cli(['apply', '-f', 'examples/services/ws-echo.yml', '-y']);
    expect(applied.code, show(applied)).to.equal(0);
    expect(applied.stdout).to.equal(`Service:  ${server.url}/proxy/services/main/ws-echo/\n`);
    const socket = new WebSocket(`${server.url.replace(/^http/, 'ws')}/proxy/services/main/ws-echo/`, { headers: { authorization: `Bearer ${server.adminToken}` } });
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    const echoed = new Promise<string>((resolve) => socket.once('message', (data) => resolve(String(data))));
    socket.send('ping through the proxy');
    expect(await echoed).to.equal('ping through the proxy');
    socket.close();
    expect((await cli(['stop', 'ws-echo'])).code).to.equal(0);
  });

  it('stops the service with its replicas', async () => {
    const stopped = await cli(['stop', 'echo-llm']);
    expect(stopped.code, show(stopped)).to.equal(0);
    expect(stopped.stdout).to.match(/^echo-llm: terminated \(stopped_by_user\)/);
  });
});
