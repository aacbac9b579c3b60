import { expect } from 'chai';
import { recordServiceSeconds } from '../store/service-stats.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { IDLE_SERVICE, latencies, thisSecond } from './helpers/service-stats.js';
import { LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

async function scrape(server: TestServer, token?: string): Promise<{ status: number; type: string | null; text: string }> {
  const response = await fetch(`${server.url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
  return { status: response.status, type: response.headers.get('content-type'), text: await response.text() };
}

for (const kind of DATABASE_KINDS) {
  describe(`GET /metrics on ${kind}`, function () {
    this.timeout(60_000);
    let server: TestServer;
    let runId: string;

    before(async () => {
      server = await startTestServer(kind, LOCAL_CONFIG);
      const applied = await server.api('POST', '/api/projects/main/apply', { items: [{ spec: IDLE_SERVICE, files: [] }] });
      expect(applied.status, JSON.stringify(applied.body)).to.equal(201);
      runId = applied.body.items[0].run.id;
      const now = thisSecond();
      await recordServiceSeconds(server.db, 'gateway-a', [
        { runId, second: new Date(now), requests: 30, errors: 3, inflight: 4, latency: latencies(27, 3) },
        // Outside the last minute: counted by a 5-minute stats window, not by a scrape.
        { runId, second: new Date(now - 120_000), requests: 600, errors: 0, inflight: 9, latency: latencies(600, 0) },
      ]);
    });
    after(async () => { await server?.stop(); });

    it('refuses a caller without a token (401) and one who is not a global admin (403), in the error shape', async () => {
      const anonymous = await scrape(server);
      expect(anonymous.status).to.equal(401);
      expect(JSON.parse(anonymous.text).error.code).to.equal('unauthorized');
      const { body: user } = await server.api('POST', '/api/users', { name: 'viewer' });
      await server.api('POST', '/api/projects/main/members', { user: 'viewer', role: 'admin' });
      const projectAdmin = await scrape(server, user.token);
      expect(projectAdmin.status).to.equal(403);
      expect(JSON.parse(projectAdmin.text).error.code).to.equal('forbidden');
    });

    it('gives a global admin the services\' last minute, replicas, and runs and instances by status, in Prometheus text', async () => {
      const { status, type, text } = await scrape(server, server.adminToken);
      expect(status).to.equal(200);
      expect(type).to.match(/^text\/plain; version=0\.0\.4/);
      const lines = text.split('\n');
      const labels = 'project="main",run="svc"';
      expect(lines).to.include.members([
        '# TYPE orchestrator_service_requests_per_second gauge',
        `orchestrator_service_requests_per_second{${labels}} 0.5`,
        `orchestrator_service_errors_per_second{${labels}} 0.05`,
        `orchestrator_service_latency_seconds{${labels},quantile="0.5"} 0.01`,
        `orchestrator_service_latency_seconds{${labels},quantile="0.99"} 0.5`,
        `orchestrator_service_inflight{${labels}} 4`,
        `orchestrator_service_replicas{${labels},state="ready"} 0`,
        `orchestrator_service_replicas{${labels},state="desired"} 0`,
        '# TYPE orchestrator_instances gauge',
      ]);
      expect(lines.filter((line) => /^orchestrator_runs\{project="main",kind="service",status="[a-z]+"\} 1$/.test(line))).to.have.length(1);
    });
  });
}

describe('GET /metrics made public in config.yml', function () {
  this.timeout(60_000);
  let server: TestServer;
  before(async () => { server = await startTestServer('pglite', `${LOCAL_CONFIG}metrics:\n  public: true\n`); });
  after(async () => { await server?.stop(); });

  it('answers without a token', async () => {
    const { status, text } = await scrape(server);
    expect(status).to.equal(200);
    expect(text).to.contain('# TYPE orchestrator_runs gauge');
  });

  it('still guards the management API', async () => {
    expect((await fetch(`${server.url}/api/projects/main/runs`)).status).to.equal(401);
  });
});
