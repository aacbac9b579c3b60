import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import winston from 'winston';
import type { ServiceRoute } from '../api/services.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { AgentClient } from '../agent/client.js';
import { ProxyCore } from '../gateway/proxy-core.js';
import type { RoutingTable } from '../gateway/routing-table.js';
import { ServiceStatsRecorder } from '../gateway/stats.js';
import { base64, randomToken, submission, waitForLine } from './helpers/agent-jobs.js';
import { freePort } from './helpers/ports.js';

const REPLICA_SERVER = `
require('node:http')
  .createServer((req, res) => res.end(JSON.stringify({ job: process.env.JOB, url: req.url })))
  .listen(Number(process.env.PORT), '127.0.0.1', () => console.log('ready'));
`;

/**
 * The proxy core against a real agent and job, with a routing table that still lists a replica the agent no
 * longer has (or whose agent is gone): the moment between a replica's end and the table's next read.
 */
describe('gateway core: a replica that has just gone', function () {
  this.timeout(30_000);
  let scratch: string;
  let agent: RunningAgent;
  let core: ProxyCore;
  let gateway: Server;
  let gatewayUrl: string;
  let route: ServiceRoute;
  const jobId = 'live-replica';

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'gateway-core-'));
    const token = randomToken();
    agent = await startAgent({ token, runtime: 'process', instanceId: 'gateway-core-test', workDir: join(scratch, 'agent') });
    const client = new AgentClient(agent.url, token);
    const port = await freePort();
    await client.submit(submission({
      jobId, commands: ['node server.cjs'], files: [{ path: 'server.cjs', contentBase64: base64(REPLICA_SERVER) }],
      env: { PORT: String(port), JOB: jobId }, ports: [port],
    }));
    await waitForLine(client, jobId, 'ready');
    const unreachableAgent = `http://127.0.0.1:${await freePort()}`;
    route = {
      runId: 'service', projectId: 'project', project: 'main', run: 'svc', auth: false, stripPrefix: true, model: null,
      maxBodyBytes: 1024 * 1024, firstByteTimeoutMs: 5000, idleTimeoutMs: 5000, holdMs: 0, gateway: null, https: 'auto', rateLimits: [], createdAt: 0,
      replicas: [
        { id: 'stopped-and-removed', replica: 0, port, agentUrl: agent.url, agentToken: token },
        { id: jobId, replica: 1, port, agentUrl: agent.url, agentToken: token },
        { id: 'on-a-lost-instance', replica: 2, port, agentUrl: unreachableAgent, agentToken: token },
      ],
    };
    const table = { serviceById: () => route, nextRead: async () => {}, afterEachRead: () => {} } as unknown as RoutingTable;
    const logger = winston.createLogger({ silent: true });
    core = new ProxyCore(table, new ServiceStatsRecorder(async () => {}, logger), async () => {}, logger);
    gateway = createServer((req, res) => void core.web(req, res, { route, path: req.url!, servicePath: req.url!, errorShape: 'api', ...(req.headers['x-read'] ? { body: Buffer.from('{}') } : {}) }));
    await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
    gatewayUrl = `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`;
  });

  after(async () => {
    core?.close();
    gateway?.close();
    await agent?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('sends each request on to a replica that answers, whichever gone replica it was sent to first', async () => {
    const answers: unknown[] = [];
    // Sequential requests take the replicas in turn: the gone ones get their share first.
    for (let i = 0; i < 6; i++) {
      const response = await fetch(`${gatewayUrl}/hello`);
      expect(response.status, await response.clone().text()).to.equal(200);
      answers.push(await response.json());
    }
    expect(answers).to.deep.equal(new Array(6).fill({ job: jobId, url: '/hello' }));
  });

  it('retries a request whose body the gateway holds, and answers 502 for one whose body has already streamed away', async () => {
    const streamed = async () => (await fetch(`${gatewayUrl}/upload`, { method: 'POST', body: 'x'.repeat(1000) })).status;
    const held = async () => (await fetch(`${gatewayUrl}/upload`, { method: 'POST', body: '{}', headers: { 'x-read': '1' } })).status;
    const statuses = { streamed: [] as number[], held: [] as number[] };
    for (let i = 0; i < 3; i++) {
      statuses.streamed.push(await streamed());
      statuses.held.push(await held());
    }
    expect(statuses.held).to.deep.equal([200, 200, 200]);
    expect(statuses.streamed).to.include(502);
  });
});
