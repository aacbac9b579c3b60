import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import type { Pool } from 'undici';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { AGENT_FORWARD_AUTH_HEADER, type JobSubmission } from '../api/agent.js';
import { AgentClient } from '../agent/client.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { openTunnel, ReplicaTunnels, TunnelRefused, type ForwardAccess } from '../gateway/replica-tunnels.js';
import { base64, randomToken, submission, waitForLine, waitForState } from './helpers/agent-jobs.js';
import { startPodmanAgent, TEST_IMAGE, type PodmanAgent } from './helpers/podman.js';
import { freePort } from './helpers/ports.js';
import { eventArrivals, rawGet, upgradeStatus } from './helpers/raw-http.js';
import { eventually } from './helpers/server.js';

/** The job's own server: CommonJS, so that it can load `ws` from the path the test hands it. */
const JOB_SERVER = `
const http = require('node:http');
const { WebSocketServer } = require(process.env.WS_MODULE);
const held = [];
const server = http.createServer((req, res) => {
  if (req.url === '/hold') {
    res.writeHead(200).write('holding, ');
    held.push(res);
    return;
  }
  if (req.url === '/headers-first') {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.flushHeaders();
    held.push(res);
    return;
  }
  if (req.url === '/release') {
    for (const waiting of held.splice(0)) waiting.end('released');
    res.end('released');
    return;
  }
  if (req.url === '/events') {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    let sent = 0;
    const timer = setInterval(() => {
      res.write('data: ' + JSON.stringify({ n: sent, emittedAt: Date.now() }) + '\\n\\n');
      if (++sent === 4) { clearInterval(timer); res.end(); }
    }, 400);
    return;
  }
  if (req.url === '/silent') return;
  if (req.url === '/slow-start') {
    setTimeout(() => res.end('late but fine'), 1500);
    return;
  }
  if (req.method === 'POST') {
    // Each piece of the body as it arrives, and when: one line per piece.
    res.writeHead(200, { 'content-type': 'application/x-ndjson' });
    req.on('data', (piece) => res.write(JSON.stringify({ text: String(piece), receivedAt: Date.now() }) + '\\n'));
    req.on('end', () => res.end());
    return;
  }
  res.writeHead(203, { 'content-type': 'application/json', 'x-job': 'served' });
  res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers }));
});
new WebSocketServer({ server }).on('connection', (socket) => socket.on('message', (data) => socket.send('echo: ' + data)));
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log('ready'));
`;

/** A service's replica: answers with its job id and the port it was told to listen on. */
const REPLICA_SERVER = `
require('node:http')
  .createServer((req, res) => res.end(process.env.REPLICA + ' ' + process.env.PORT))
  .listen(Number(process.env.PORT), '127.0.0.1', () => console.log('ready'));
`;

/** A GET through `pool`: its status and body. */
async function getThrough(pool: Pool, path: string): Promise<{ status: number; body: string }> {
  const answer = await pool.request({ path, method: 'GET' });
  const body = await answer.body.text();
  // undici frees the connection for the pool's next request a microtask after the answer ends, as between two clients' requests.
  await new Promise(setImmediate);
  return { status: answer.statusCode, body };
}

async function tunnelRefusal(access: ForwardAccess): Promise<TunnelRefused> {
  const error = await openTunnel(access).then((socket) => { socket.destroy(); throw new Error('the tunnel opened'); }, (refusal: unknown) => refusal);
  expect(error).to.be.instanceOf(TunnelRefused);
  return error as TunnelRefused;
}

function errorCode(body: string): string | undefined {
  return (JSON.parse(body) as { error?: { code?: string } }).error?.code;
}

describe('agent port forward (process runtime)', function () {
  this.timeout(30_000);
  let scratch: string;
  let token: string;
  let agent: RunningAgent;
  let client: AgentClient;
  let job: JobSubmission;
  let jobPort: number;
  let silentPort: number;

  const access = (path: string, port = jobPort, jobId = job.jobId) => client.portAccess(jobId, port, path);
  const forwardAccess = (port = jobPort, jobId = job.jobId, headers = access('').headers): ForwardAccess => {
    const { hostname, port: agentPort, pathname } = new URL(access('', port, jobId).url);
    return { host: hostname, port: Number(agentPort), basePath: pathname.replace(/\/$/, ''), headers };
  };

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'agent-port-forward-'));
    token = randomToken();
    agent = await startAgent({ token, runtime: 'process', instanceId: 'port-forward-test', workDir: join(scratch, 'agent'), portFirstByteTimeoutMs: 1000 });
    client = new AgentClient(agent.url, token);
    jobPort = await freePort();
    silentPort = await freePort();
    job = submission({
      commands: ['node server.cjs'],
      files: [{ path: 'server.cjs', contentBase64: base64(JOB_SERVER) }],
      env: { PORT: String(jobPort), WS_MODULE: createRequire(import.meta.url).resolve('ws') },
      ports: [jobPort, silentPort],
    });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
  });

  after(async () => {
    await agent?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('forwards a GET with its path, query and headers, and keeps the job\'s status and headers, without the agent\'s token', async () => {
    const { url, headers } = access('/info?x=1&y=two');
    const response = await fetch(url, { headers: { ...headers, 'x-custom': 'kept' } });
    expect(response.status).to.equal(203);
    expect(response.headers.get('x-job')).to.equal('served');
    const seen = await response.json() as { method: string; url: string; headers: Record<string, string> };
    expect(seen.method).to.equal('GET');
    expect(seen.url).to.equal('/info?x=1&y=two');
    expect(seen.headers['x-custom']).to.equal('kept');
    expect(seen.headers).not.to.have.property('authorization');
  });

  it('streams a POST body to the job and its answer back', async () => {
    const chunks = ['first chunk,', 'second chunk,', 'third chunk'];
    let lastSentAt = 0;
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const next = chunks.shift();
        if (next === undefined) return controller.close();
        await new Promise((resolve) => setTimeout(resolve, 200));
        if (chunks.length === 0) lastSentAt = Date.now();
        controller.enqueue(new TextEncoder().encode(next));
      },
    });
    const { url, headers } = access('/upload');
    const response = await fetch(url, { method: 'POST', headers, body, duplex: 'half' } as RequestInit);
    expect(response.status).to.equal(200);
    const received = (await response.text()).trimEnd().split('\n').map((line) => JSON.parse(line) as { text: string; receivedAt: number });
    expect(received.map((piece) => piece.text).join('')).to.equal('first chunk,second chunk,third chunk');
    // The job had the first chunk before the last was sent: nothing on the way held the body back until it was whole.
    expect(received[0]!.text).to.equal('first chunk,');
    expect(received[0]!.receivedAt).to.be.below(lastSentAt);
  });

  it('passes Server-Sent Events on one by one, as the job emits them', async () => {
    const { url, headers } = access('/events');
    const response = await fetch(url, { headers });
    expect(response.headers.get('content-type')).to.equal('text/event-stream');
    const events = await eventArrivals<{ n: number; emittedAt: number }>(response);
    expect(events.map((event) => event.n)).to.deep.equal([0, 1, 2, 3]);
    for (let i = 0; i + 1 < events.length; i++) {
      // Each event was here before the job wrote the next one: nothing held it back to be sent in a batch.
      expect(events[i]!.arrivedAt, `event ${i}`).to.be.below(events[i + 1]!.emittedAt);
    }
  });

  it('carries a WebSocket both ways', async () => {
    const { url, headers } = access('/socket');
    const socket = new WebSocket(url.replace(/^http/, 'ws'), { headers });
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    const replies: string[] = [];
    for (const text of ['hello', 'again']) {
      socket.send(text);
      replies.push(await new Promise<string>((resolve) => socket.once('message', (data) => resolve(String(data)))));
    }
    socket.close();
    expect(replies).to.deep.equal(['echo: hello', 'echo: again']);
  });

  it('demands the agent\'s token, for requests and for upgrades', async () => {
    const { url } = access('/info');
    expect((await fetch(url)).status).to.equal(401);
    const wrong = await fetch(url, { headers: { authorization: 'Bearer wrong' } });
    expect(wrong.status).to.equal(401);
    expect(errorCode(await wrong.text())).to.equal('unauthorized');
    const wsUrl = url.replace(/^http/, 'ws');
    expect(await upgradeStatus(wsUrl, {})).to.equal(401);
    expect(await upgradeStatus(wsUrl, { authorization: 'Bearer wrong' })).to.equal(401);
  });

  it('passes the caller\'s own Authorization to the job when the agent\'s token comes in x-agent-authorization, which never reaches the job', async () => {
    const { url, headers } = access('/info');
    expect(headers).to.have.property(AGENT_FORWARD_AUTH_HEADER);
    const response = await fetch(url, { headers: { ...headers, authorization: 'Bearer callers-own' } });
    expect(response.status).to.equal(203);
    const seen = await response.json() as { headers: Record<string, string> };
    expect(seen.headers.authorization).to.equal('Bearer callers-own');
    expect(seen.headers).not.to.have.property(AGENT_FORWARD_AUTH_HEADER);
  });

  it('still takes the agent\'s token in Authorization, and removes it before forwarding', async () => {
    const { url } = access('/info');
    const response = await fetch(url, { headers: { authorization: `Bearer ${token}` } });
    expect(response.status).to.equal(203);
    const seen = await response.json() as { headers: Record<string, string> };
    expect(seen.headers).not.to.have.property('authorization');
    expect(await upgradeStatus(url.replace(/^http/, 'ws'), { authorization: `Bearer ${token}` })).to.equal(101);
  });

  it('refuses a wrong x-agent-authorization, even beside the right Authorization, on forwards and on the agent\'s own routes', async () => {
    const { url } = access('/info');
    const wrong = { [AGENT_FORWARD_AUTH_HEADER]: 'Bearer wrong', authorization: `Bearer ${token}` };
    const response = await fetch(url, { headers: wrong });
    expect(response.status).to.equal(401);
    expect(errorCode(await response.text())).to.equal('unauthorized');
    expect(await upgradeStatus(url.replace(/^http/, 'ws'), wrong)).to.equal(401);
    expect(await upgradeStatus(url.replace(/^http/, 'ws'), access('/socket').headers)).to.equal(101);
    const own = `${agent.url}/api/jobs/${job.jobId}`;
    expect((await fetch(own, { headers: wrong })).status).to.equal(401);
    // Through Kubernetes' pod proxy the token can only come in the agent's own header: the API server takes Authorization.
    expect((await fetch(own, { headers: { [AGENT_FORWARD_AUTH_HEADER]: `Bearer ${token}` } })).status).to.equal(200);
  });

  it('passes the answer\'s headers on before its first byte, so that a stream that starts quiet is seen as started', async () => {
    const quiet = access('/headers-first');
    const response = await fetch(quiet.url, { headers: quiet.headers, signal: AbortSignal.timeout(3000) });
    expect(response.status).to.equal(200);
    expect(response.headers.get('content-type')).to.equal('text/event-stream');
    const release = access('/release');
    await (await fetch(release.url, { headers: release.headers })).text();
    expect(await response.text()).to.equal('released');
  });

  it('counts the exchanges in flight in the job\'s status: an unfinished answer and an open WebSocket', async () => {
    const forwarding = async () => (await client.job(job.jobId)).forwarding;
    await eventually(async () => await forwarding() === 0, 5000, 'no exchange in flight');
    const hold = access('/hold');
    const held = await fetch(hold.url, { headers: hold.headers });
    expect(held.status).to.equal(200);
    expect(await forwarding()).to.equal(1);
    const release = access('/release');
    await (await fetch(release.url, { headers: release.headers })).text();
    expect(await held.text()).to.equal('holding, released');
    await eventually(async () => await forwarding() === 0, 5000, 'the held answer to be counted out');

    const socketAccess = access('/socket');
    const socket = new WebSocket(socketAccess.url.replace(/^http/, 'ws'), { headers: socketAccess.headers });
    await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
    expect(await forwarding()).to.equal(1);
    socket.close();
    await eventually(async () => await forwarding() === 0, 5000, 'the closed WebSocket to be counted out');
  });

  it('opens a tunnel that carries request after request to the job without the agent\'s token, counted while open, closed when its pool retires', async () => {
    const forwarding = async () => (await client.job(job.jobId)).forwarding;
    await eventually(async () => await forwarding() === 0, 5000, 'no exchange in flight');
    const tunnels = new ReplicaTunnels();
    const pool = tunnels.poolOf({ id: job.jobId, replica: 0, port: jobPort, agentUrl: agent.url, agentToken: token }, () => forwardAccess());
    const answers = [await getThrough(pool, '/first'), await getThrough(pool, '/second?x=1')];
    expect(answers.map((answer) => answer.status)).to.deep.equal([203, 203]);
    const seen = answers.map((answer) => JSON.parse(answer.body) as { url: string; headers: Record<string, string> });
    expect(seen.map((answer) => answer.url)).to.deep.equal(['/first', '/second?x=1']);
    for (const answer of seen) expect(answer.headers).not.to.have.property(AGENT_FORWARD_AUTH_HEADER);
    expect(await forwarding(), 'one tunnel carried both').to.equal(1);
    tunnels.keepOnly([]);
    await eventually(async () => await forwarding() === 0, 5000, 'the retired pool to close its idle tunnel');
    tunnels.close();
  });

  it('refuses a tunnel without the agent\'s token, to an undeclared port, an unknown job, or a port nothing listens on', async () => {
    const wrong = await tunnelRefusal(forwardAccess(jobPort, job.jobId, { [AGENT_FORWARD_AUTH_HEADER]: 'Bearer wrong' }));
    expect([wrong.status, wrong.code]).to.deep.equal([401, 'unauthorized']);
    const undeclared = await tunnelRefusal(forwardAccess(jobPort + 1 === silentPort ? jobPort + 2 : jobPort + 1));
    expect([undeclared.status, undeclared.code]).to.deep.equal([404, 'port_not_declared']);
    const unknown = await tunnelRefusal(forwardAccess(jobPort, 'no-such-job'));
    expect([unknown.status, unknown.code]).to.deep.equal([404, 'job_not_found']);
    const refused = await tunnelRefusal(forwardAccess(silentPort));
    expect([refused.status, refused.code]).to.deep.equal([502, 'upstream_refused']);
  });

  it('starts two jobs of one servicePort side by side, each told its own PORT and reached through ports/<servicePort>', async () => {
    const servicePort = await freePort();
    const replicas = [0, 1].map(() => submission({
      commands: ['node replica.cjs'],
      files: [{ path: 'replica.cjs', contentBase64: base64(REPLICA_SERVER) }],
      servicePort,
    }));
    for (const replica of replicas) {
      replica.env = { PORT: '1', REPLICA: replica.jobId };
      await client.submit(replica);
    }
    const listening: number[] = [];
    for (const replica of replicas) {
      await waitForLine(client, replica.jobId, 'ready');
      const { url, headers } = access('/', servicePort, replica.jobId);
      const response = await fetch(url, { headers });
      expect(response.status).to.equal(200);
      const [answeredBy, port] = (await response.text()).split(' ');
      expect(answeredBy).to.equal(replica.jobId);
      listening.push(Number(port));
    }
    expect(listening, 'one replica on the service port, the other elsewhere').to.include(servicePort);
    expect(new Set(listening).size).to.equal(2);
  });

  it('starts replicas of one servicePort on two agents of this machine at the same moment on ports of their own, and frees the port with its job', async () => {
    const servicePort = await freePort();
    const neighbour = await startAgent({ token, runtime: 'process', instanceId: 'port-forward-neighbour', workDir: join(scratch, 'neighbour') });
    const clients = [client, new AgentClient(neighbour.url, token)];
    const replicaOn = () => {
      const replica = submission({ commands: ['node replica.cjs'], files: [{ path: 'replica.cjs', contentBase64: base64(REPLICA_SERVER) }], servicePort });
      replica.env = { REPLICA: replica.jobId };
      return replica;
    };
    const portOf = async (agent: AgentClient, replica: JobSubmission) => {
      await waitForLine(agent, replica.jobId, 'ready');
      const { url, headers } = agent.portAccess(replica.jobId, servicePort, '/');
      return Number((await (await fetch(url, { headers })).text()).split(' ')[1]);
    };
    try {
      for (let round = 0; round < 3; round++) {
        const replicas = clients.map(replicaOn);
        await Promise.all(replicas.map((replica, i) => clients[i]!.submit(replica)));
        const listening = await Promise.all(replicas.map((replica, i) => portOf(clients[i]!, replica)));
        expect(listening, 'one replica on the service port, the other elsewhere').to.include(servicePort);
        expect(new Set(listening).size).to.equal(2);
        for (const [i, replica] of replicas.entries()) {
          await clients[i]!.stop(replica.jobId, { abort: true });
          await waitForState(clients[i]!, replica.jobId, ['exited', 'failed', 'stopped']);
          await clients[i]!.remove(replica.jobId);
        }
      }
      const alone = replicaOn();
      await clients[1]!.submit(alone);
      expect(await portOf(clients[1]!, alone), 'the port its removed neighbours held').to.equal(servicePort);
    } finally {
      await neighbour.close();
    }
  });

  it('answers 404 for a port the job did not declare and for an unknown job, on requests and upgrades', async () => {
    const undeclared = access('/info', jobPort + 1 === silentPort ? jobPort + 2 : jobPort + 1);
    const response = await fetch(undeclared.url, { headers: undeclared.headers });
    expect(response.status).to.equal(404);
    expect(errorCode(await response.text())).to.equal('port_not_declared');
    expect(await upgradeStatus(undeclared.url.replace(/^http/, 'ws'), undeclared.headers)).to.equal(404);
    const unknown = access('/info', jobPort, 'no-such-job');
    const missing = await fetch(unknown.url, { headers: unknown.headers });
    expect(missing.status).to.equal(404);
    expect(errorCode(await missing.text())).to.equal('job_not_found');
  });

  it('answers 502 when nothing listens on a declared port and 504 when the job does not answer in time', async () => {
    const refused = access('/', silentPort);
    const response = await fetch(refused.url, { headers: refused.headers });
    expect(response.status).to.equal(502);
    expect(errorCode(await response.text())).to.equal('upstream_refused');
    const silent = access('/silent');
    const late = await fetch(silent.url, { headers: silent.headers });
    expect(late.status).to.equal(504);
    expect(errorCode(await late.text())).to.equal('upstream_timeout');
  });

  it('waits for the first byte as long as the caller asks in x-agent-first-byte-timeout-ms, not its own default', async () => {
    const slow = access('/slow-start');
    const response = await fetch(slow.url, { headers: { ...slow.headers, 'x-agent-first-byte-timeout-ms': '5000' } });
    expect(response.status).to.equal(200);
    expect(await response.text()).to.equal('late but fine');
    const impatient = await fetch(slow.url, { headers: { ...slow.headers, 'x-agent-first-byte-timeout-ms': '200' } });
    expect(impatient.status).to.equal(504);
  });

  it('answers 409 for a job that is not running', async () => {
    const done = submission({ commands: ['true'], ports: [jobPort] });
    await client.submit(done);
    await waitForState(client, done.jobId, ['exited']);
    const { url, headers } = access('/info', jobPort, done.jobId);
    const response = await fetch(url, { headers });
    expect(response.status).to.equal(409);
    expect(errorCode(await response.text())).to.equal('job_not_running');
  });

  describe('path tricks', () => {
    let decoy: Server;
    let decoyPort: number;
    let decoyHits = 0;

    before(async () => {
      decoy = createHttpServer((_req, res) => {
        decoyHits++;
        res.end('decoy');
      });
      await new Promise<void>((resolve) => decoy.listen(0, '127.0.0.1', resolve));
      decoyPort = (decoy.address() as AddressInfo).port;
    });

    after(async () => {
      await new Promise((resolve) => decoy.close(resolve));
    });

    it('never reach another port or host, whatever the path holds', async () => {
      const prefix = `/api/jobs/${job.jobId}/ports`;
      const tricks = [
        `${prefix}/${jobPort}/../../${decoyPort}/x`,
        `${prefix}/${jobPort}/%2e%2e/%2e%2e/${decoyPort}/x`,
        `${prefix}/${jobPort}/%2E%2E%2F%2E%2E%2F${decoyPort}/x`,
        `${prefix}/${jobPort}%2F..%2F${decoyPort}/x`,
        `${prefix}/%2e%2e/${decoyPort}/x`,
        `${prefix}/${jobPort}%00${decoyPort}/x`,
        `${prefix}/${jobPort}/%00/x`,
        `${prefix}/${jobPort}//127.0.0.1:${decoyPort}/x`,
        `${prefix}/${jobPort}/http://127.0.0.1:${decoyPort}/x`,
        `${prefix}/${jobPort}@127.0.0.1:${decoyPort}/x`,
        `${prefix}/${decoyPort}/x`,
      ];
      const { headers } = access('/');
      for (const path of tricks) {
        const response = await rawGet(agent.url, path, headers);
        const fromJob = response.headers['x-job'] === 'served';
        expect(fromJob || (response.status >= 400 && response.status < 500), `${path}: ${response.status} ${response.body}`).to.equal(true);
        expect(response.body, path).not.to.equal('decoy');
      }
      expect(decoyHits).to.equal(0);
    });
  });
});

describe('agent port forward (docker runtime, against Podman)', function () {
  this.timeout(60_000);
  let podman: PodmanAgent | undefined;
  let client: AgentClient;

  before(async function () {
    this.timeout(600_000);
    podman = await startPodmanAgent('port-forward');
    client = podman.client;
  });

  after(async () => {
    await podman?.stop();
  });

  it('reaches a container\'s port where the engine published it', async () => {
    const port = await freePort();
    const job = submission({ image: TEST_IMAGE, ports: [port], commands: ['mkdir -p /www', 'echo served > /www/index.html', 'echo ready', `httpd -f -p ${port} -h /www`] });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
    const { url, headers } = client.portAccess(job.jobId, port, '/index.html');
    const deadline = Date.now() + 10_000;
    let response = await fetch(url, { headers });
    // httpd may start listening a moment after "ready".
    while (response.status === 502 && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      response = await fetch(url, { headers });
    }
    expect(response.status).to.equal(200);
    expect(await response.text()).to.equal('served\n');
  });

  it('publishes a job\'s servicePort and tells the container in PORT', async () => {
    const servicePort = await freePort();
    const job = submission({
      image: TEST_IMAGE, servicePort, env: { PORT: '1' },
      commands: ['mkdir -p /www', 'echo "port $PORT" > /www/index.html', 'echo ready', 'httpd -f -p "$PORT" -h /www'],
    });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
    const { url, headers } = client.portAccess(job.jobId, servicePort, '/index.html');
    const response = await eventually(async () => {
      const answer = await fetch(url, { headers });
      return answer.status === 200 && answer;
    }, 10_000, 'httpd to answer');
    expect(await response.text()).to.equal(`port ${servicePort}\n`);
  });
});
