/**
 * Gateway benchmark: what our in-server proxy (`/proxy/services/...`) costs beside the same upstream reached
 * directly, through Debian's nginx, and through the agent's port forward alone; time to the first SSE event;
 * how long autoscaling takes to put a second replica in rotation; the server's memory under many streams and
 * idle keep-alive connections; and over HTTPS, our gateway process beside nginx terminating TLS.
 *
 *   npm run bench:gateway                 # embedded PGlite, as `orchestrator server` runs by default
 *   npm run bench:gateway -- --postgres   # a scratch database on the local PostgreSQL
 *   npm run bench:gateway -- --seconds 5 --rounds 1 --streams 100 --idle 1000 --hold 10
 *   npm run bench:gateway -- --sections 1,2   # only the throughput and SSE sections
 *   npm run bench:gateway -- --sections 5     # only HTTPS through the gateway and through nginx
 *
 * The server runs as a child process (bench/gateway-server.ts) on the local backend, process runtime; the
 * upstream is a tiny node:http server deployed as a service replica. Figures are printed beside the goals
 * (≥ 0.4 × nginx's requests per second at 32 connections, ≤ 0.3 ms added at p50 at one connection, < 300 MB
 * with 1 000 streams and 10 000 idle connections); nothing is asserted.
 */
import { execFileSync, fork, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { get, type ClientRequest } from 'node:http';
import { get as httpsGet } from 'node:https';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Run } from '../api/objects.js';
import { LocalBackend } from '../backends/local/local.js';
import { KEEP_ALIVE_TIMEOUT_MS } from '../api/keep-alive.js';
import { createScratchDatabase } from '../test/helpers/databases.js';
import { freePort } from '../test/helpers/ports.js';
import type { Answer, Question, ServerReady } from './gateway-server.js';
import { startNginx } from './gateway-nginx.js';
import { cpuSeconds, listenerPid } from './process-cpu.js';
import { wrk, type WrkFigures, type WrkLoad } from './gateway-wrk.js';
import { median, quantile } from './quantiles.js';

const flag = (name: string, fallback: number) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
};
const usePostgres = process.argv.includes('--postgres');
const ROUNDS = flag('rounds', 3);
const LOADED: WrkLoad = { threads: 2, connections: 32, seconds: flag('seconds', 10) };
const UNLOADED: WrkLoad = { threads: 1, connections: 1, seconds: Math.max(1, Math.round(LOADED.seconds / 2)) };
const SSE_SAMPLES = flag('sse-samples', 50);
const STREAMS = flag('streams', 1000);
const IDLE_CONNECTIONS = flag('idle', 10_000);
const IDLE_IN_FLIGHT = 64;
/** How long section 4 holds its connections before it judges the memory they take (under the server's keep-alive of 65 s). */
const HOLD_SECONDS = flag('hold', 30);
const SCALE_LOAD_RPS = 50;
const SECTIONS = new Set((process.argv.includes('--sections') ? process.argv[process.argv.indexOf('--sections') + 1]! : '1,2,3,4,5').split(','));
/** Issue 24's goals for the proxy hop; the memory goal is issue 11's. */
const GOALS = { nginxRatio: 0.4, addedP50Ms: 0.3, memoryMb: 300 };

const SERVER_MAIN = join(dirname(fileURLToPath(import.meta.url)), 'gateway-server.js');

/** The upstream: a small body at any path, one SSE event at once on /events (then a comment every 20 s), and who it is. */
const UPSTREAM = `
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
const replica = randomUUID();
const body = 'hello from the upstream\\n';
createServer((req, res) => {
  if (req.url.startsWith('/events')) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-replica': replica });
    res.write('data: ' + Date.now() + '\\n\\n');
    const timer = setInterval(() => res.write(': still here\\n\\n'), 20000);
    res.on('close', () => clearInterval(timer));
    return;
  }
  if (req.url === '/whoami') {
    res.writeHead(200, { 'content-type': 'application/json', 'x-replica': replica });
    return res.end(JSON.stringify({ replica, port: Number(process.env.PORT) }));
  }
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': body.length, 'x-replica': replica });
  res.end(body);
}).listen(Number(process.env.PORT), '127.0.0.1');
`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const fixed = (n: number, digits = 2) => n.toFixed(digits);
const verdict = (met: boolean) => (met ? 'met' : 'NOT met');
const pad = (text: string, width: number) => text.padEnd(width);

/** The server in its own process: its URL, its database through the IPC channel, its memory from /proc. */
class ServerProcess {
  private nextId = 0;
  private readonly pending = new Map<number, (answer: Answer) => void>();

  private constructor(private readonly child: ChildProcess, readonly url: string, readonly driver: string) {
    child.on('message', (answer: Answer) => {
      this.pending.get(answer.id)?.(answer);
      this.pending.delete(answer.id);
    });
  }

  static async start(dir: string, databaseUrl: string | undefined): Promise<ServerProcess> {
    const child = fork(SERVER_MAIN, [dir, databaseUrl ?? ''], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    const ready = await new Promise<ServerReady>((resolve, reject) => {
      child.once('message', (message: ServerReady) => resolve(message));
      child.once('exit', (code) => reject(new Error(`the server exited with ${code} before it served`)));
    });
    return new ServerProcess(child, ready.url, ready.driver);
  }

  async query<T = Record<string, any>>(sql: string, params: unknown[] = []): Promise<T[]> {
    const id = this.nextId++;
    const answer = await new Promise<Answer>((resolve) => {
      this.pending.set(id, resolve);
      this.child.send({ id, sql, params } satisfies Question);
    });
    if (answer.error !== undefined) throw new Error(`${sql}: ${answer.error}`);
    return answer.rows as T[];
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** VmRSS (resident now) or VmHWM (the most resident so far), in MB. */
  memoryMb(field: 'VmRSS' | 'VmHWM' = 'VmRSS'): number {
    const status = readFileSync(`/proc/${this.child.pid}/status`, 'utf8');
    return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)![1]) / 1024;
  }

  async stop(): Promise<void> {
    const exited = new Promise((r) => this.child.once('exit', r));
    this.child.disconnect();
    await Promise.race([exited, sleep(15_000)]);
    this.child.kill('SIGKILL');
  }
}

interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
}

interface Deployment {
  server: ServerProcess;
  token: string;
  direct: Target;
  viaAgent: Target;
  ours: Target;
  /** Our proxy to a copy of the service with `auth: false`: no token to check. */
  oursPublic: Target;
  upstreamPort: number;
  /** The server's RSS once the services are ready, before any load. */
  freshMb: number;
  /** The processes whose CPU per request section 1 reads: the server, the replica's agent and the replica. */
  hops: Hop[];
}

interface Hop {
  name: string;
  pid: number;
}

function openFilesLimit(): number {
  return Number(/^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'))![1]);
}

async function main(): Promise<void> {
  const limit = openFilesLimit();
  const needed = IDLE_CONNECTIONS + STREAMS + 1000;
  console.log(`# gateway benchmark (${usePostgres ? 'postgres' : 'pglite'}); open files limit ${limit}`);
  if (limit < needed) throw new Error(`the open file limit is ${limit}; ${needed} are needed: ulimit -n ${needed} (as root, or under a hard limit that high)`);
  const dir = mkdtempSync(join(tmpdir(), 'orch-bench-gateway-'));
  const scratch = usePostgres ? await createScratchDatabase() : null;
  const server = await ServerProcess.start(dir, scratch?.url);
  const startedAt = Date.now();
  try {
    const deployment = await deploy(server);
    console.log(`server (${server.driver}) at ${server.url}, pid of its own; services ready ${((Date.now() - startedAt) / 1000).toFixed(1)} s after start`);
    if (SECTIONS.has('1')) await throughput(deployment, join(dir, 'nginx'));
    if (SECTIONS.has('2')) await firstEvents(deployment);
    if (SECTIONS.has('3')) await autoscaling(deployment);
    if (SECTIONS.has('4')) await memory(deployment);
    if (SECTIONS.has('5')) await httpsPath(deployment, join(dir, 'https'));
  } finally {
    await server.stop();
    const local = new LocalBackend({ stateDir: join(dir, 'backends', 'local') });
    for (const instance of await local.list()) await local.terminate(instance.id);
    await scratch?.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A member's token, a fleet of local instances, and the services `echo`, `public` (the same without auth) and `scaled`, ready. */
async function deploy(server: ServerProcess): Promise<Deployment> {
  const api = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${server.url}/api${path}`, {
      method, headers: { authorization: 'Bearer bench-token', 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const answer = await response.json() as any;
    if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(answer)}`);
    return answer;
  };
  const { token } = await api('POST', '/users', { name: 'bench' });
  await api('POST', '/projects/main/members', { user: 'bench', role: 'user' });
  const files = [{ path: 'server.mjs', contentBase64: Buffer.from(UPSTREAM).toString('base64') }];
  const service = (name: string, port: number, fields: Record<string, unknown> = {}) =>
    ({ spec: { type: 'service', name, port, files: ['server.mjs'], commands: ['node server.mjs'], ...fields }, files });
  await api('POST', '/projects/main/apply', {
    items: [
      { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..4' } },
      service('echo', await freePort()),
      service('public', await freePort(), { auth: false }),
      service('scaled', await freePort(), {
        replicas: '1..2', scaling: { metric: 'rps', target: 5, window: '10s', scale_up_delay: '0s', scale_down_delay: '1h' },
      }),
    ],
  });
  for (const deadline = Date.now() + 180_000; ;) {
    const runs = await Promise.all(['echo', 'public', 'scaled'].map((name) => api('GET', `/projects/main/runs/${name}`) as Promise<Run>));
    if (runs.every((run) => run.service?.replicas.some((replica) => replica.state === 'ready'))) break;
    if (Date.now() > deadline) throw new Error(`the services were not ready within 180 s: ${JSON.stringify(runs.map((run) => run.service))}`);
    await sleep(250);
  }
  const ours: Target = { name: 'our proxy → agent → replica', url: `${server.url}/proxy/services/main/echo/`, headers: { authorization: `Bearer ${token}` } };
  const whoami = await fetch(`${ours.url}whoami`, { headers: ours.headers });
  if (!whoami.ok) throw new Error(`the proxy answered ${whoami.status}: ${await whoami.text()}`);
  const upstreamPort = ((await whoami.json()) as { port: number }).port;
  const [replica] = await server.query(
    `SELECT r.job_id, r.spec->>'port' AS port, i.agent_url, i.agent_token FROM runs r JOIN instances i ON i.id = r.instance_id
     WHERE r.name = 'echo' AND r.service_id IS NOT NULL AND r.ready_at IS NOT NULL`);
  const agentPid = listenerPid(Number(new URL(replica!.agent_url).port));
  const replicaPid = listenerPid(upstreamPort);
  return {
    hops: [
      { name: 'server', pid: server.pid },
      ...(agentPid === undefined ? [] : [{ name: 'agent', pid: agentPid }]),
      ...(replicaPid === undefined ? [] : [{ name: 'replica', pid: replicaPid }]),
    ],
    oursPublic: { name: 'our proxy, auth: false service', url: `${server.url}/proxy/services/main/public/`, headers: {} },
    server, token, upstreamPort, ours, freshMb: server.memoryMb(),
    direct: { name: 'direct: the replica\'s own port', url: `http://127.0.0.1:${upstreamPort}/`, headers: {} },
    viaAgent: {
      name: 'agent port forward → replica',
      url: `${replica!.agent_url}/api/jobs/${replica!.job_id}/ports/${replica!.port}/`,
      headers: { 'x-agent-authorization': `Bearer ${replica!.agent_token}` },
    },
  };
}

interface Summary {
  rps: number;
  p50: number;
  p99: number;
  failures: number;
  /** Per hop, then wrk's own, CPU µs per request (median over rounds). */
  cpuUs: number[];
}

/** A wrk run and, per hop and then for wrk itself, the CPU µs its processes used per request meanwhile. */
interface Measured extends WrkFigures {
  cpuUs: number[];
}

async function wrkWithCpu(target: Target, load: WrkLoad, hops: Hop[]): Promise<Measured> {
  const before = hops.map((hop) => cpuSeconds(hop.pid));
  const figures = await wrk(target.url, load, target.headers);
  const perRequest = (seconds: number) => (seconds * 1e6) / Math.max(1, figures.requests);
  return { ...figures, cpuUs: [...hops.map((hop, i) => perRequest(cpuSeconds(hop.pid) - before[i]!)), perRequest(figures.cpuSeconds)] };
}

/** CPU seconds a second the process uses while no request comes: the server's controllers and their database. */
async function idleCpu(pid: number, seconds = 5): Promise<number> {
  const before = cpuSeconds(pid);
  await sleep(seconds * 1000);
  return (cpuSeconds(pid) - before) / seconds;
}

/**
 * wrk against each target in turn, round after round, with many connections and with one; medians of each,
 * with the CPU per request of `hops` (CPU time from /proc: steadier than requests per second on a busy machine).
 */
async function measure(targets: Target[], hops: Hop[] = []): Promise<{ loaded: Map<Target, Summary>; unloaded: Map<Target, Summary>; hops: Hop[] }> {
  const loaded = new Map<Target, Measured[]>(targets.map((target) => [target, []]));
  const unloaded = new Map<Target, Measured[]>(targets.map((target) => [target, []]));
  for (const target of targets) await wrk(target.url, { threads: 1, connections: 4, seconds: 1 }, target.headers);
  for (let round = 0; round < ROUNDS; round++) {
    for (const target of targets) {
      loaded.get(target)!.push(await wrkWithCpu(target, LOADED, hops));
      unloaded.get(target)!.push(await wrkWithCpu(target, UNLOADED, hops));
    }
  }
  const summary = (runs: Measured[]): Summary => ({
    rps: median(runs.map((r) => r.requestsPerSecond)),
    p50: median(runs.map((r) => r.p50Ms)),
    p99: median(runs.map((r) => r.p99Ms)),
    failures: runs.reduce((sum, r) => sum + r.failures, 0),
    cpuUs: [...hops, 'wrk'].map((_, i) => median(runs.map((r) => r.cpuUs[i]!))),
  });
  const summaries = (runs: Map<Target, Measured[]>) => new Map(targets.map((target) => [target, summary(runs.get(target)!)]));
  return { loaded: summaries(loaded), unloaded: summaries(unloaded), hops };
}

/** The two tables of `measure`'s figures, each followed by what `compare` says of it. */
function printFigures(targets: Target[], figures: Awaited<ReturnType<typeof measure>>, compare: (figures: Map<Target, Summary>) => string[]): void {
  const cpu = (summary: Summary) => summary.cpuUs.map((us) => pad(`${fixed(us, 0)} µs`, 16)).join('');
  const row = (name: string, summary: Summary) =>
    `${pad(name, 34)} ${pad(fixed(summary.rps, 0), 9)} ${pad(`${fixed(summary.p50)} ms`, 10)} ${pad(`${fixed(summary.p99)} ms`, 10)} ${pad(String(summary.failures), 9)}${cpu(summary)}`;
  for (const [title, runs] of [[`${LOADED.connections} connections, ${LOADED.threads} threads`, figures.loaded], [`1 connection (unloaded), ${UNLOADED.seconds} s`, figures.unloaded]] as const) {
    console.log(`\n${title}`);
    console.log(`${pad('target', 34)} ${pad('req/s', 9)} ${pad('p50', 10)} ${pad('p99', 10)} ${pad('failures', 9)}${[...figures.hops.map((hop) => hop.name), 'wrk'].map((name) => pad(`CPU/req ${name}`, 16)).join('')}`);
    for (const target of targets) console.log(row(target.name, runs.get(target)!));
    for (const line of compare(runs)) console.log(line);
  }
}

/** Section 1: the in-server proxy beside the replica itself, nginx and the agent's forward alone. */
async function throughput(deployment: Deployment, nginxDir: string): Promise<void> {
  const nginx = await startNginx(nginxDir, await freePort(), deployment.upstreamPort);
  const viaNginx: Target = { name: 'nginx → replica', url: nginx.url, headers: {} };
  const targets: Target[] = [deployment.direct, viaNginx, deployment.viaAgent, deployment.oursPublic, deployment.ours];
  const hops = [...deployment.hops, { name: 'nginx', pid: nginx.workerPid }];
  console.log(`\n## 1. requests per second and latency: wrk -t${LOADED.threads} -c${LOADED.connections} -d${LOADED.seconds}s, keep-alive; medians of ${ROUNDS} rounds`);
  const serverIdle = await idleCpu(deployment.server.pid);
  console.log(`the server's own CPU while no request comes (its controllers and their database): ${fixed(serverIdle * 1000, 0)} ms a second`);
  let figures: Awaited<ReturnType<typeof measure>>;
  try {
    figures = await measure(targets, hops);
  } finally {
    await nginx.stop();
  }
  const cpuOf = (summary: Summary, name: string) => summary.cpuUs[hops.findIndex((hop) => hop.name === name)] ?? 0;
  printFigures(targets, figures, (runs) => {
    const ours = runs.get(deployment.ours)!;
    const nginxFigures = runs.get(viaNginx)!;
    const direct = runs.get(deployment.direct)!;
    const agent = runs.get(deployment.viaAgent)!;
    const open = runs.get(deployment.oursPublic)!;
    const ratio = ours.rps / nginxFigures.rps;
    const added = ours.p50 - direct.p50;
    // The server's idle share is what its controllers would have used anyway during a request's time.
    const oursPath = { server: cpuOf(ours, 'server') - (serverIdle * 1e6) / ours.rps, agent: cpuOf(ours, 'agent'), replica: cpuOf(ours, 'replica') };
    const nginxPath = { nginx: cpuOf(nginxFigures, 'nginx'), replica: cpuOf(nginxFigures, 'replica') };
    const oursTotal = oursPath.server + oursPath.agent + oursPath.replica;
    const nginxTotal = nginxPath.nginx + nginxPath.replica;
    return [
      `ours / nginx, req/s: ${fixed(ratio)} (goal ≥ ${GOALS.nginxRatio}: ${verdict(ratio >= GOALS.nginxRatio)}); auth: false service / nginx: ${fixed(open.rps / nginxFigures.rps)}; agent forward alone / nginx: ${fixed(agent.rps / nginxFigures.rps)}`,
      `CPU per request along the path, µs: ours ${fixed(oursTotal, 0)} (server ${fixed(oursPath.server, 0)} less its idle rate, agent ${fixed(oursPath.agent, 0)}, replica ${fixed(oursPath.replica, 0)}); nginx's ${fixed(nginxTotal, 0)} (nginx ${fixed(nginxPath.nginx, 0)}, replica ${fixed(nginxPath.replica, 0)}); nginx's ÷ ours ${fixed(nginxTotal / oursTotal)}; wrk's own: ${fixed(ours.cpuUs.at(-1)!, 0)} and ${fixed(nginxFigures.cpuUs.at(-1)!, 0)}`,
      `p50 added over direct: ours ${fixed(added)} ms (goal ≤ ${GOALS.addedP50Ms} ms: ${verdict(added <= GOALS.addedP50Ms)}), auth: false ${fixed(open.p50 - direct.p50)} ms; the agent's HTTP forward alone (which our proxy's requests no longer take) ${fixed(agent.p50 - direct.p50)} ms; nginx ${fixed(nginxFigures.p50 - direct.p50)} ms`,
    ];
  });
}

/**
 * Section 5: HTTPS. A gateway (`orchestrator gateway-server`, started by the server) with one self-signed
 * certificate for `*.bench.test` (type manual) publishes `echo`; nginx terminates TLS with the same certificate in
 * front of the replica's port. wrk speaks TLS to both (one handshake per connection, keep-alive after it).
 */
async function httpsPath(deployment: Deployment, dir: string): Promise<void> {
  const { server } = deployment;
  mkdirSync(dir, { recursive: true });
  const tls = { certFile: join(dir, 'cert.pem'), keyFile: join(dir, 'key.pem') };
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-keyout', tls.keyFile, '-out', tls.certFile, '-subj', '/CN=*.bench.test', '-addext', 'subjectAltName=DNS:*.bench.test'], { stdio: 'ignore' });
  const [httpPort, httpsPort, nginxPort] = await Promise.all([freePort(), freePort(), freePort()]);
  const api = (method: string, path: string, body?: unknown) => fetch(`${server.url}/api/projects/main${path}`, {
    method, headers: { authorization: 'Bearer bench-token', 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const applied = await api('POST', '/apply', { items: [{ spec: {
    type: 'gateway', name: 'bench', domain: '*.bench.test', default: true, public_ip: false, http_port: httpPort, https_port: httpsPort,
    certificate: { type: 'manual', cert_file: tls.certFile, key_file: tls.keyFile },
  } }] });
  if (!applied.ok) throw new Error(`applying the gateway: ${applied.status} ${await applied.text()}`);
  const ours: Target = { name: 'gateway (TLS) → agent → replica', url: `https://127.0.0.1:${httpsPort}/`, headers: { ...deployment.ours.headers, Host: 'echo.bench.test' } };
  const nginx = await startNginx(join(dir, 'nginx'), nginxPort, deployment.upstreamPort, tls);
  try {
    for (const deadline = Date.now() + 60_000; !await answersOverTls(`${ours.url}whoami`, ours.headers);) {
      if (Date.now() > deadline) throw new Error('the gateway did not publish echo over HTTPS within 60 s');
      await sleep(250);
    }
    const viaNginx: Target = { name: 'nginx (TLS) → replica', url: `https://127.0.0.1:${nginxPort}/`, headers: {} };
    const targets = [deployment.direct, viaNginx, ours];
    console.log(`\n## 5. HTTPS: wrk -t${LOADED.threads} -c${LOADED.connections} -d${LOADED.seconds}s over TLS (one handshake per connection), keep-alive; medians of ${ROUNDS} rounds`);
    printFigures(targets, await measure(targets), (runs) => {
      const direct = runs.get(deployment.direct)!;
      const theirs = runs.get(viaNginx)!;
      const mine = runs.get(ours)!;
      return [
        `ours / nginx, req/s: ${fixed(mine.rps / theirs.rps)}`,
        `p50 added over direct (plain HTTP to the replica): ours ${fixed(mine.p50 - direct.p50)} ms, nginx ${fixed(theirs.p50 - direct.p50)} ms`,
      ];
    });
  } finally {
    await nginx.stop();
    await api('DELETE', '/gateways/bench');
  }
}

/** Whether a GET over TLS answers 200, the certificate taken as it is. */
function answersOverTls(url: string, headers: Record<string, string>): Promise<boolean> {
  return new Promise((resolve) => {
    httpsGet(url, { headers, rejectUnauthorized: false }, (response) => {
      response.resume();
      resolve(response.statusCode === 200);
    }).on('error', () => resolve(false));
  });
}

/** Milliseconds from sending a request to its first `data:` line, on a fresh connection. */
function firstEvent(url: string, headers: Record<string, string>): Promise<{ ms: number; request: ClientRequest }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const request = get(url, { headers, agent: false }, (response) => {
      if (response.statusCode !== 200) {
        request.destroy();
        reject(new Error(`${url} answered ${response.statusCode}`));
        return;
      }
      response.on('data', (chunk: Buffer) => {
        if (chunk.includes('data:')) resolve({ ms: performance.now() - started, request });
      });
    });
    request.on('error', reject);
  });
}

async function firstEvents(deployment: Deployment): Promise<void> {
  const targets = [deployment.direct, deployment.viaAgent, deployment.ours];
  const samples = new Map<Target, number[]>(targets.map((target) => [target, []]));
  for (let i = 0; i < SSE_SAMPLES; i++) {
    for (const target of targets) {
      const { ms, request } = await firstEvent(`${target.url}events`, target.headers);
      request.destroy();
      samples.get(target)!.push(ms);
    }
  }
  console.log(`\n## 2. time to the first SSE event, a fresh connection each, ${SSE_SAMPLES} samples each`);
  const directMedian = median(samples.get(deployment.direct)!);
  for (const target of targets) {
    const values = samples.get(target)!;
    const added = target === deployment.direct ? '' : ` (+${fixed(median(values) - directMedian)} ms over direct)`;
    console.log(`${pad(target.name, 34)} median ${fixed(median(values))} ms, p90 ${fixed(quantile(values, 0.9))} ms${added}`);
  }
}

/** Load on `scaled` from a steady 50 req/s until an answer comes from a second replica; when each step happened. */
async function autoscaling(deployment: Deployment): Promise<void> {
  const { server } = deployment;
  console.log(`\n## 3. autoscaling: replicas 1..2, rps target 5, window 10s, scale_up_delay 0s; ${SCALE_LOAD_RPS} req/s through the proxy`);
  const url = `${server.url}/proxy/services/main/scaled/`;
  const headers = { authorization: `Bearer ${deployment.token}` };
  const replicaOf = async () => {
    const response = await fetch(url, { headers });
    await response.arrayBuffer();
    return response.headers.get('x-replica');
  };
  const first = await replicaOf();
  const loadStart = Date.now();
  let reachedAt: number | undefined;
  let failures = 0;
  const deadline = loadStart + 180_000;
  const inFlight = new Set<Promise<void>>();
  for (let tick = 0; reachedAt === undefined && Date.now() < deadline; tick++) {
    const request = replicaOf().then(
      (replica) => { if (replica !== first && reachedAt === undefined) reachedAt = Date.now(); },
      () => { failures++; },
    );
    inFlight.add(request);
    void request.finally(() => inFlight.delete(request));
    await sleep(Math.max(0, loadStart + (tick + 1) * (1000 / SCALE_LOAD_RPS) - Date.now()));
  }
  await Promise.all(inFlight);
  if (reachedAt === undefined) {
    const [parent] = await server.query(`SELECT desired_replicas, status_message FROM runs WHERE name = 'scaled' AND service_id IS NULL`);
    console.log(`no second replica answered within 180 s (desired replicas ${parent?.desired_replicas}: ${parent?.status_message})`);
    return;
  }
  const [replica] = await server.query(
    `SELECT r.submitted_at, r.started_at, r.ready_at, i.created_at AS instance_created_at,
       (SELECT min(e.created_at) FROM events e WHERE e.object_id = i.id AND e.reason = 'Ready') AS agent_ready_at
     FROM runs r JOIN runs parent ON parent.id = r.service_id LEFT JOIN instances i ON i.id = r.instance_id
     WHERE parent.name = 'scaled' AND parent.service_id IS NULL AND r.replica = 1`);
  const after = (at: unknown) => (at ? `${fixed((new Date(at as string).getTime() - loadStart) / 1000)} s` : 'never');
  const instanceCreated = new Date(replica!.instance_created_at).getTime();
  const bootMs = instanceCreated >= loadStart && replica!.agent_ready_at ? new Date(replica!.agent_ready_at).getTime() - instanceCreated : 0;
  const totalMs = reachedAt - loadStart;
  console.log(`after the load started: replica 1 created (the autoscaler's decision) ${after(replica!.submitted_at)}, its instance created ${after(replica!.instance_created_at)}, agent healthy ${after(replica!.agent_ready_at)}, job started ${after(replica!.started_at)}, ready ${after(replica!.ready_at)}, first answer from it ${fixed(totalMs / 1000)} s (${failures} failed requests)`);
  console.log(`instance boot (created → agent healthy): ${bootMs === 0 ? 'none, placed on an instance already up' : `${fixed(bootMs / 1000)} s`}; load start → traffic on the new replica, less the boot: ${fixed((totalMs - bootMs) / 1000)} s`);
}

/** A connection that has had one answer through the proxy and is kept open; resolves once the answer is read whole. */
function keptConnection(port: number, path: string, token: string, onClose: () => void): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let received = Buffer.alloc(0);
    socket.once('connect', () => socket.write(`GET ${path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer ${token}\r\n\r\n`));
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const end = received.indexOf('\r\n\r\n');
      if (end === -1) return;
      const head = received.subarray(0, end).toString('latin1');
      const length = Number(/^content-length:\s*(\d+)/im.exec(head)?.[1] ?? NaN);
      if (!head.startsWith('HTTP/1.1 200')) reject(new Error(`the proxy answered ${head.split('\r\n')[0]}`));
      else if (received.length >= end + 4 + length) resolve(socket);
    });
    socket.on('error', reject);
    socket.once('close', onClose);
  });
}

/** Runs `open` COUNT times, at most `parallel` at once. */
async function inWaves<T>(count: number, parallel: number, open: (i: number) => Promise<T>): Promise<T[]> {
  const opened: T[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: parallel }, async () => {
    while (next < count) opened.push(await open(next++));
  }));
  return opened;
}

/**
 * The server's RSS while the connections stay open, sampled each second for HOLD_SECONDS: the median of the last five,
 * after V8 has had the time to collect the garbage of the answers that opened them (its memory reducer runs once
 * allocation has been quiet for some seconds); and from which second on it stayed below its figure at the start.
 */
async function holding(server: ServerProcess, open: () => number): Promise<{ mb: number; open: number; settledS: number | null }> {
  const startMb = server.memoryMb();
  const readings: number[] = [];
  for (let second = 1; second <= HOLD_SECONDS; second++) {
    await sleep(1000);
    readings.push(server.memoryMb());
  }
  let settled = readings.length;
  while (settled > 0 && readings[settled - 1]! < startMb) settled--;
  return { mb: median(readings.slice(-5)), open: open(), settledS: settled === readings.length ? null : settled + 1 };
}

async function memory(deployment: Deployment): Promise<void> {
  const { server } = deployment;
  console.log(`\n## 4. the server's memory (RSS of its process): ${STREAMS} SSE streams and ${IDLE_CONNECTIONS} keep-alive connections through the proxy`);
  await sleep(2000);
  const restMb = server.memoryMb();
  let open = 0;
  let closedByServer = 0;
  const samples: Array<{ open: number; mb: number }> = [];
  const sampler = setInterval(() => samples.push({ open, mb: server.memoryMb() }), 100);
  try {
    const streamsStart = Date.now();
    const streams = await inWaves(STREAMS, 100, () => firstEvent(`${deployment.ours.url}events`, deployment.ours.headers));
    await sleep(1000);
    const streamsMb = server.memoryMb();
    console.log(`fresh, services just ready: ${fixed(deployment.freshMb, 0)} MB; at rest after the sections above: ${fixed(restMb, 0)} MB`);
    console.log(`with ${STREAMS} SSE streams open (first event received on each, ${fixed((Date.now() - streamsStart) / 1000 - 1, 1)} s to open): ${fixed(streamsMb, 0)} MB`);
    const { port } = new URL(server.url);
    const path = new URL(deployment.ours.url).pathname;
    const idleStart = Date.now();
    const sockets = await inWaves(IDLE_CONNECTIONS, IDLE_IN_FLIGHT, async () => {
      const socket = await keptConnection(Number(port), path, deployment.token, () => { closedByServer++; open--; });
      open++;
      return socket;
    });
    const openS = (Date.now() - idleStart) / 1000;
    samples.push({ open, mb: server.memoryMb() });
    const fullest = samples.reduce((best, sample) => (sample.open > best.open ? sample : best), { open: 0, mb: streamsMb });
    const peakMb = Math.max(...samples.map((sample) => sample.mb));
    const perConnectionKb = fullest.open > 0 ? ((fullest.mb - streamsMb) * 1024) / fullest.open : 0;
    console.log(`plus ${IDLE_CONNECTIONS} keep-alive connections, one answer each through the proxy (${IDLE_IN_FLIGHT} in flight at once): all answered in ${fixed(openS, 1)} s (${fixed(IDLE_CONNECTIONS / openS, 0)}/s); ${closedByServer} were closed by the server meanwhile (it holds an idle one ${KEEP_ALIVE_TIMEOUT_MS / 1000} s after its answer)`);
    const extrapolatedMb = streamsMb + (perConnectionKb * IDLE_CONNECTIONS) / 1024;
    console.log(`most open at once: ${fullest.open}, with ${fixed(fullest.mb, 0)} MB (${fixed(perConnectionKb, 1)} KB a connection over the streams alone; for ${IDLE_CONNECTIONS} held at once: about ${fixed(extrapolatedMb, 0)} MB, extrapolated); peak RSS while they opened: ${fixed(peakMb, 0)} MB`);
    const held = await holding(server, () => open);
    const allHeld = held.open === IDLE_CONNECTIONS;
    const judgedMb = allHeld ? held.mb : Math.max(peakMb, extrapolatedMb);
    console.log(`held ${HOLD_SECONDS} s after the last answer, ${held.open} of them still open: ${fixed(held.mb, 0)} MB (median of the last 5 s; below its figure at the last answer for good ${held.settledS === null ? 'never' : `from ${fixed(held.settledS, 0)} s on`})`);
    console.log(`goal < ${GOALS.memoryMb} MB with all of them held: ${verdict(judgedMb < GOALS.memoryMb)} (judged on ${fixed(judgedMb, 0)} MB, ${allHeld ? 'held' : 'the peak or its extrapolation, as not all were held'}); the process's high-water mark over the whole run (wrk included): ${fixed(server.memoryMb('VmHWM'), 0)} MB`);
    for (const socket of sockets) socket.destroy();
    for (const stream of streams) stream.request.destroy();
  } finally {
    clearInterval(sampler);
  }
}

await main();
process.exit(0);
