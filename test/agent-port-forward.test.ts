import { expect } from 'chai';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, request, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import type { JobSubmission } from '../api/agent.js';
import { AgentClient } from '../agent/client.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { base64, randomToken, submission, waitForLine, waitForState } from './helpers/agent-jobs.js';
import { startPodmanAgent, TEST_IMAGE, type PodmanAgent } from './helpers/podman.js';
import { freePort } from './helpers/ports.js';

/** The job's own server: CommonJS, so that it can load `ws` from the path the test hands it. */
const JOB_SERVER = `
const http = require('node:http');
const { WebSocketServer } = require(process.env.WS_MODULE);
const server = http.createServer((req, res) => {
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
  if (req.method === 'POST') {
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    req.pipe(res);
    return;
  }
  res.writeHead(203, { 'content-type': 'application/json', 'x-job': 'served' });
  res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers }));
});
new WebSocketServer({ server }).on('connection', (socket) => socket.on('message', (data) => socket.send('echo: ' + data)));
server.listen(Number(process.env.PORT), '127.0.0.1', () => console.log('ready'));
`;

/** A request sent with its path exactly as written: fetch would resolve `..` before sending. */
function rawGet(base: string, path: string, headers: Record<string, string>): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  const { hostname, port } = new URL(base);
  return new Promise((resolve, reject) => {
    const req = request({ host: hostname, port, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk; }).on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject).end();
  });
}

/** The status a WebSocket upgrade was refused with, or 101 when it opened. */
function upgradeStatus(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { headers });
    socket.once('open', () => {
      socket.close();
      resolve(101);
    });
    socket.once('unexpected-response', (_req, res) => {
      res.resume();
      resolve(res.statusCode!);
    });
    socket.once('error', reject);
  });
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
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        const next = chunks.shift();
        if (next === undefined) return controller.close();
        await new Promise((resolve) => setTimeout(resolve, 50));
        controller.enqueue(new TextEncoder().encode(next));
      },
    });
    const { url, headers } = access('/upload');
    const response = await fetch(url, { method: 'POST', headers, body, duplex: 'half' } as RequestInit);
    expect(response.status).to.equal(200);
    expect(await response.text()).to.equal('first chunk,second chunk,third chunk');
  });

  it('passes Server-Sent Events on one by one, as the job emits them', async () => {
    const { url, headers } = access('/events');
    const response = await fetch(url, { headers });
    expect(response.headers.get('content-type')).to.equal('text/event-stream');
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    const events: { n: number; emittedAt: number; arrivedAt: number }[] = [];
    let buffered = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += value;
      let end: number;
      while ((end = buffered.indexOf('\n\n')) >= 0) {
        const event = JSON.parse(buffered.slice('data: '.length, end)) as { n: number; emittedAt: number };
        events.push({ ...event, arrivedAt: Date.now() });
        buffered = buffered.slice(end + 2);
      }
    }
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
});
