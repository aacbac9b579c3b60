/**
 * Scale benchmark: one server holding thousands of active runs on gpucloud-emulator instances whose agents are
 * simulated (one process answers every instance's agent API; each task prints a line a second).
 *
 *   npm run bench:scale                       # embedded PGlite: 1 000 instances, 10 000 active runs
 *   npm run bench:scale -- --postgres         # a scratch database on ORCHESTRATOR_TEST_POSTGRES_URL
 *   npm run bench:scale -- --instances 100 --runs 1000   # a smaller run (levels at a tenth, half and all of --runs)
 *
 * The server runs as its own process (so that its CPU and RSS are its own, and it can be SIGKILLed); the emulator,
 * its simulated agents and the load generator share this one. At each level of active runs it prints, beside the goals:
 * - reconcile lag: the time between two looks of the run controller at a running job (as the simulated agent sees
 *   `POST /api/jobs/watch`) minus the 5 s the controller asks to wait while the instance's change feed follows the
 *   job: how late a due reconcile is done;
 * - a job's end seen after: for tasks that end 8–12.5 s after they start, the time from the simulated job's exit to the
 *   run's end in the server (with the change feed, the watch does not wait for its next look);
 * - API p50/p99 of `ps` (GET /runs), `logs` (GET /runs/:name/logs) and `apply` (POST /runs/apply of a short task),
 *   asked from a thread of its own (bench/api-probes.ts), whose event loop nothing else shares;
 * - the server's CPU (share of one core over the window) and RSS; the database's size;
 * - per look: the server's CPU milliseconds and, on PostgreSQL, the statements (transactions the scratch database
 *   committed: every statement outside a transaction is one) and the CPU milliseconds of its backends;
 * - after a SIGKILL of the server and its restart: how long until every running job was looked at again.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import postgres from 'postgres';
import { orchestratorCommand } from '../agent/launch.js';
import { startEmulator } from '../backends/gpucloud/emulator.js';
import { FOLLOWED_POLL_MS } from '../controllers/run-controller.js';
import type { SimulatedJob } from '../backends/gpucloud/simulated-job.js';
import { createScratchDatabase } from '../test/helpers/databases.js';
import { probeApi } from './api-probes.js';
import { projectApi } from './project-api.js';
import { quantile } from './quantiles.js';

const flag = (name: string, fallback: number) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
};
const INSTANCES = flag('instances', 1000);
const RUNS = flag('runs', 10_000);
/** One run in this many is a service (one replica, probed every 10 s); the rest are tasks printing a line a second. */
const SERVICE_EVERY = flag('service-every', 20);
const WINDOW_MS = flag('window', 20) * 1000;
const SAMPLES = flag('samples', 20);
/**
 * `--files-kb N`: each task carries N kB of files, as `orchestrator apply` uploads a working directory whose repo has no
 * reachable remote (up to 5 MiB): the run's row holds them, and a look that read them would pay for them every second.
 */
const FILES_KB = flag('files-kb', 0);
const FILES = FILES_KB > 0 ? [{ path: 'data.bin', contentBase64: randomBytes(FILES_KB * 1024).toString('base64') }] : undefined;
/** Runs a `POST /apply` carries: 100, fewer where their files would pass 4 MiB (the server takes 8 MiB a body). */
const APPLY_BATCH = FILES ? Math.max(1, Math.min(100, Math.floor(4 * 1024 * 1024 / FILES[0]!.contentBase64.length))) : 100;
const usePostgres = process.argv.includes('--postgres');
/** Without the SIGKILL at each level: one server runs throughout, so that `NODE_OPTIONS=--cpu-prof` profiles all of it. */
const kill = !process.argv.includes('--no-kill');
/** `--cpu-prof DIR`: the server writes a CPU profile there when it exits (NODE_OPTIONS refuses --cpu-prof). */
const cpuProfileDir = process.argv.includes('--cpu-prof') ? process.argv[process.argv.indexOf('--cpu-prof') + 1]! : null;
/**
 * `--levels 1000,5000`: stop at these levels instead of a tenth, half and all of --runs. The instances are split for
 * --runs either way: fewer than 9 blocks of an 8-GPU instance give each run a GPU, which the runs' `gpu: 0` refuses.
 */
const LEVELS = process.argv.includes('--levels')
  ? process.argv[process.argv.indexOf('--levels') + 1]!.split(',').map(Number)
  : [...new Set([Math.round(RUNS / 10), Math.round(RUNS / 2), RUNS])];
const TOKEN = 'bench-scale-token';
/** What the watch asks between two looks at a running job that its instance's change feed follows. */
const POLL_INTERVAL_MS = FOLLOWED_POLL_MS;
/** Tasks applied at each level's window that end this long after they start (and half a second more each): how soon each end is seen. */
const ENDERS = 10;
const ENDER_SECONDS = 8;
const GOALS = { lagP99Ms: 2000, apiP99Ms: 200, rssMb: 1024 };

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** A level's window opens once every running job was looked at within this long: the ramp's backlog is not its lag. */
const CAUGHT_UP_WITHIN_MS = POLL_INTERVAL_MS + 1000;
const CATCH_UP_LIMIT_MS = 120_000;

/**
 * Waits until the watch keeps up with every running job (each asked within CAUGHT_UP_WITHIN_MS), after the jobs of a
 * ramp were started faster than they were looked at; returns how long that took, or null when it never did.
 */
async function watchCatchesUp(running: () => SimulatedJob[]): Promise<number | null> {
  const started = Date.now();
  while (Date.now() - started < CATCH_UP_LIMIT_MS) {
    const now = Date.now();
    if (running().every((job) => job.lastAskedAt !== null && now - job.lastAskedAt <= CAUGHT_UP_WITHIN_MS)) return now - started;
    await sleep(250);
  }
  return null;
}
const ms = (n: number) => (Number.isNaN(n) ? 'n/a' : n >= 10_000 ? `${(n / 1000).toFixed(1)} s` : `${Math.round(n)} ms`);
/** A figure with two decimals; n/a for one not measured (the database's own, on the embedded database). */
const fixed = (n: number) => (Number.isNaN(n) ? 'n/a' : n.toFixed(2));
const verdict = (value: number, goal: number) => (value <= goal ? 'met' : 'NOT met');

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface ServerProcess { child: ChildProcess; url: string }

async function startServerProcess(dir: string, port: number, databaseUrl: string | undefined): Promise<ServerProcess> {
  const { command, args } = orchestratorCommand();
  const profile = cpuProfileDir ? ['--cpu-prof', '--cpu-prof-dir', cpuProfileDir] : [];
  const child = spawn(command, [...profile, ...args, 'server', '--port', String(port), '--server-dir', dir], {
    env: {
      ...process.env, ORCHESTRATOR_SERVER_ADMIN_TOKEN: TOKEN, ORCHESTRATOR_LOG_LEVEL: 'warn',
      ...(databaseUrl ? { ORCHESTRATOR_DATABASE_URL: databaseUrl } : {}),
    },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-4000); });
  const url = `http://127.0.0.1:${port}`;
  for (const started = Date.now(); Date.now() - started < 120_000;) {
    if (child.exitCode !== null) throw new Error(`the server exited: ${stderr}`);
    const up = await fetch(`${url}/api/projects/main/runs?limit=1`, { headers: { authorization: `Bearer ${TOKEN}` } }).then((r) => r.ok, () => false);
    if (up) return { child, url };
    await sleep(200);
  }
  throw new Error(`the server did not answer within 120 s: ${stderr}`);
}

function processFigures(pid: number): { cpuTicks: number; rssMb: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const rssKb = Number(/^VmRSS:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  return { cpuTicks: Number(fields[11]) + Number(fields[12]), rssMb: rssKb / 1024 };
}
const TICKS_PER_SECOND = 100;

async function main(): Promise<void> {
  const emulator = await startEmulator({ port: 0, bootDelayMs: 200, agents: 'simulated', capacity: { L4: INSTANCES } });
  const agents = emulator.simulatedAgents!;
  let lags: number[] = [];
  let serviceLags: number[] = [];
  /** The jobs of the tasks that end by themselves, by run name, as first asked about. */
  const enderJobs = new Map<string, SimulatedJob>();
  agents.onJobAsked = (job, sinceLastMs) => {
    const { runName } = job.submission;
    if (runName.startsWith('end-')) enderJobs.set(runName, job);
    // Short tasks are looked at soon after they start, not at the interval: their looks say nothing of the lag.
    if (sinceLastMs === null || runName.startsWith('probe-') || runName.startsWith('end-')) return;
    const lag = Math.max(0, sinceLastMs - POLL_INTERVAL_MS);
    lags.push(lag);
    if (job.submission.runName.startsWith('s')) serviceLags.push(lag);
  };
  const dir = mkdtempSync(join(tmpdir(), 'orch-bench-scale-'));
  writeFileSync(join(dir, 'config.yml'), `projects:\n- name: main\n  backends:\n  - type: gpucloud\n    api_url: ${emulator.url}\n    creds:\n      type: api_key\n      api_key: ${emulator.apiKey}\n`);
  const scratch = usePostgres ? await createScratchDatabase() : null;
  const port = await freePort();
  let server = await startServerProcess(dir, port, scratch?.url);
  const api = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const { status, text } = await projectApi(server.url, TOKEN, method, path, body);
    return { status, body: text ? JSON.parse(text) : null };
  };
  const databaseMb = async (): Promise<number> => {
    if (!scratch) return Number(execFileSync('du', ['-sk', join(dir, 'data')]).toString().split('\t')[0]) / 1024;
    const sql = postgres(scratch.url, { max: 1, onnotice: () => {} });
    const [row] = await sql`SELECT pg_database_size(current_database())::float8 AS bytes`;
    await sql.end();
    return Number(row!.bytes) / 1024 / 1024;
  };
  /** PostgreSQL only: transactions committed in the scratch database, and the CPU ticks of its backends now alive. */
  const databaseWork = async (): Promise<{ commits: number; cpuTicks: Map<number, number> } | null> => {
    if (!scratch) return null;
    const sql = postgres(scratch.url, { max: 1, onnotice: () => {} });
    const [stats] = await sql`SELECT xact_commit::float8 AS commits FROM pg_stat_database WHERE datname = current_database()`;
    const backends = await sql`SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`;
    await sql.end();
    const cpuTicks = new Map<number, number>();
    for (const { pid } of backends) {
      try { cpuTicks.set(pid as number, processFigures(pid as number).cpuTicks); } catch { /* gone meanwhile */ }
    }
    return { commits: Number(stats!.commits), cpuTicks };
  };
  const running = (): SimulatedJob[] => agents.jobs().filter((job) => job.status.state === 'running');
  const curve: string[] = [];

  try {
    console.log(`\n## ${RUNS} active runs on ${INSTANCES} gpucloud-emulator instances with simulated agents (${usePostgres ? 'PostgreSQL' : 'PGlite'})${FILES ? `, each task with ${FILES_KB} kB of files` : ''}`);
    const perInstance = Math.ceil(RUNS * 1.1 / INSTANCES);
    const bootStart = Date.now();
    const fleet = await api('POST', '/fleets/apply', {
      spec: { type: 'fleet', name: 'scale', backends: ['gpucloud'], nodes: `${INSTANCES}..${INSTANCES}`, idle_duration: 'off', blocks: perInstance, resources: { gpu: 'L4:8' } },
    });
    if (fleet.status >= 300) throw new Error(`fleet apply: ${JSON.stringify(fleet.body)}`);
    for (;;) {
      const instances = await api('GET', '/instances');
      if (instances.body.filter((i: { status: string }) => i.status === 'idle').length === INSTANCES) break;
      await sleep(1000);
    }
    console.log(`${INSTANCES} instances idle after ${((Date.now() - bootStart) / 1000).toFixed(1)} s, each shared by up to ${perInstance} runs`);

    let applied = 0;
    for (const level of LEVELS) {
      const rampStart = Date.now();
      while (applied < level) {
        const items = Array.from({ length: Math.min(APPLY_BATCH, level - applied) }, (_, index) => runSpec(applied + index));
        const answer = await api('POST', '/apply', { items });
        if (answer.status >= 300) throw new Error(`apply: ${JSON.stringify(answer.body)}`);
        applied += items.length;
      }
      for (let last = -1; ;) {
        const now = running().length;
        if (now >= level) break;
        if (Date.now() - rampStart > 30 * 60_000) throw new Error(`only ${now} of ${level} runs running after 30 minutes`);
        if (now !== last && Date.now() - rampStart > 10_000) process.stdout.write(`  ${now}/${level} running\r`);
        last = now;
        await sleep(1000);
      }
      console.log(`\n### ${level} active runs (reached ${((Date.now() - rampStart) / 1000).toFixed(1)} s after applying the next ${LEVELS[LEVELS.indexOf(level) - 1] ? level - LEVELS[LEVELS.indexOf(level) - 1]! : level})`);
      const caughtUpMs = await watchCatchesUp(running);
      console.log(caughtUpMs === null
        ? `the watch did not catch up within ${CATCH_UP_LIMIT_MS / 1000} s: some running job went unlooked at for over ${CAUGHT_UP_WITHIN_MS / 1000} s all along`
        : `the watch caught up ${(caughtUpMs / 1000).toFixed(1)} s after that (every running job looked at within the last ${CAUGHT_UP_WITHIN_MS / 1000} s)`);
      await sleep(1000);
      lags = [];
      serviceLags = [];
      const databaseBefore = await databaseWork();
      const before = processFigures(server.child.pid!);
      const benchBefore = process.cpuUsage();
      const agentCallsBefore = agents.requests;
      const windowStart = Date.now();
      const names = running().map((job) => job.submission.runName).filter((name) => name.startsWith('t'));
      const enders = Array.from({ length: ENDERS }, (_, index) => `end-${level}-${index}`);
      const endersApplied = await api('POST', '/apply', {
        items: enders.map((name, index) => ({ spec: { type: 'task', name, commands: [`sleep ${ENDER_SECONDS + index / 2}`, 'echo end'], resources: { gpu: 0 } } })),
      });
      if (endersApplied.status >= 300) throw new Error(`apply: ${JSON.stringify(endersApplied.body)}`);
      const { ps, logs, apply, psAnswer } = await probeApi({ url: server.url, token: TOKEN, windowMs: WINDOW_MS - (Date.now() - windowStart), samples: SAMPLES, names, level });
      const endSeen: number[] = [];
      for (const name of enders) {
        const run = (await api('GET', `/runs/${name}`)).body;
        const job = enderJobs.get(name);
        if (run?.finishedAt && job?.status.finishedAt) endSeen.push(Date.parse(run.finishedAt) - Date.parse(job.status.finishedAt));
      }
      const seconds = (Date.now() - windowStart) / 1000;
      const after = processFigures(server.child.pid!);
      const databaseAfter = await databaseWork();
      const cpu = ((after.cpuTicks - before.cpuTicks) / TICKS_PER_SECOND / seconds) * 100;
      const benchUsage = process.cpuUsage(benchBefore);
      const benchCpu = ((benchUsage.user + benchUsage.system) / 1e6 / seconds) * 100;
      const lagP50 = quantile(lags, 0.5);
      const lagP99 = quantile(lags, 0.99);
      const apiP99 = Math.max(quantile(ps, 0.99), quantile(logs, 0.99), quantile(apply, 0.99));
      const size = await databaseMb();
      console.log(`reconcile lag of running jobs (${lags.length} looks in ${seconds.toFixed(0)} s): p50 ${ms(lagP50)}, p99 ${ms(lagP99)}; goal p99 ≤ ${ms(GOALS.lagP99Ms)}: ${verdict(lagP99, GOALS.lagP99Ms)}`);
      console.log(`a job's end seen after (${endSeen.length} of ${ENDERS} tasks that ended ${ENDER_SECONDS}–${ENDER_SECONDS + (ENDERS - 1) / 2} s after they started): p50 ${ms(quantile(endSeen, 0.5))}, max ${ms(Math.max(...endSeen))}`);
      console.log(`  of which services' replicas (${serviceLags.length} looks): p50 ${ms(quantile(serviceLags, 0.5))}, p99 ${ms(quantile(serviceLags, 0.99))}`);
      console.log(`  looks per second: ${(lags.length / seconds).toFixed(0)} (one a second per running job would be ${running().length}); agent calls per second: ${((agents.requests - agentCallsBefore) / seconds).toFixed(0)}`);
      const serverMsPerLook = ((after.cpuTicks - before.cpuTicks) / TICKS_PER_SECOND) * 1000 / lags.length;
      let databasePerLook = { cpuMs: NaN, statements: NaN };
      if (databaseBefore && databaseAfter) {
        const backendTicks = [...databaseAfter.cpuTicks].reduce((sum, [pid, ticks]) => sum + ticks - (databaseBefore.cpuTicks.get(pid) ?? 0), 0);
        databasePerLook = { cpuMs: (backendTicks / TICKS_PER_SECOND) * 1000 / lags.length, statements: (databaseAfter.commits - databaseBefore.commits) / lags.length };
      }
      const perLook = `server CPU ${serverMsPerLook.toFixed(2)} ms, database CPU ${fixed(databasePerLook.cpuMs)} ms, statements ${fixed(databasePerLook.statements)}`;
      console.log(`  per look (the API load's share included; the database's own figures on PostgreSQL only, the embedded one's CPU is the server's): ${perLook}`);
      console.log(`API (${ps.length} each) p50 / p99: ps ${ms(quantile(ps, 0.5))} / ${ms(quantile(ps, 0.99))}, logs ${ms(quantile(logs, 0.5))} / ${ms(quantile(logs, 0.99))}, apply ${ms(quantile(apply, 0.5))} / ${ms(quantile(apply, 0.99))}; goal p99 ≤ ${ms(GOALS.apiP99Ms)}: ${verdict(apiP99, GOALS.apiP99Ms)}`);
      if (ps.length <= 100) console.log(`  (of ${ps.length} answers the p99 is the slowest one, nearer a p${(100 * ps.length / (ps.length + 1)).toFixed(0)}: --samples 200 --window 300 for a p99 that one answer does not decide)`);
      console.log(`  ps answers ${psAnswer.runs} runs in ${(psAnswer.bytes / 1024).toFixed(0)} kB`);
      console.log(`server: CPU ${cpu.toFixed(0)}% of one core, RSS ${after.rssMb.toFixed(0)} MB; goal RSS ≤ ${GOALS.rssMb} MB: ${verdict(after.rssMb, GOALS.rssMb)}`);
      console.log(`  this process (emulator, simulated agents, load): CPU ${benchCpu.toFixed(0)}% of one core; machine load average ${loadavg()[0]!.toFixed(1)} on ${availableParallelism()} CPUs`);
      console.log(`database: ${size.toFixed(0)} MB`);

      const row = `| ${level} | ${caughtUpMs === null ? 'no' : ms(caughtUpMs)} | ${ms(lagP50)} / ${ms(lagP99)} | ${ms(quantile(endSeen, 0.5))} / ${ms(Math.max(...endSeen))} | ${(lags.length / seconds).toFixed(0)} | ${serverMsPerLook.toFixed(2)} / ${fixed(databasePerLook.cpuMs)} | ${fixed(databasePerLook.statements)} | ${ms(quantile(ps, 0.99))} | ${ms(quantile(logs, 0.99))} | ${ms(quantile(apply, 0.99))} | ${cpu.toFixed(0)}% | ${after.rssMb.toFixed(0)} MB | ${size.toFixed(0)} MB |`;
      if (!kill) {
        curve.push(`${row} |`);
        continue;
      }
      const killedAt = Date.now();
      server.child.kill('SIGKILL');
      await new Promise((resolve) => server.child.once('exit', resolve));
      server = await startServerProcess(dir, port, scratch?.url);
      const listeningAfter = Date.now() - killedAt;
      let unobserved = running();
      for (;;) {
        unobserved = unobserved.filter((job) => job.status.state === 'running' && (job.lastAskedAt ?? 0) < killedAt);
        if (unobserved.length === 0) break;
        if (Date.now() - killedAt > 10 * 60_000) throw new Error(`${unobserved.length} running jobs not looked at 10 minutes after the restart`);
        await sleep(100);
      }
      const observedAfter = Date.now() - killedAt;
      console.log(`SIGKILL and restart: serving after ${ms(listeningAfter)}, every running job looked at again after ${ms(observedAfter)}`);
      curve.push(`${row} ${ms(observedAfter)} |`);
    }
    console.log(`\n### The curve (${usePostgres ? 'PostgreSQL' : 'PGlite'}, ${INSTANCES} instances)`);
    console.log('| active runs | watch caught up after | reconcile lag p50 / p99 | a job\'s end seen after p50 / max | looks / s | CPU ms a look: server / database | statements a look | ps p99 | logs p99 | apply p99 | server CPU | server RSS | database | SIGKILL → all observed |');
    console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
    for (const row of curve) console.log(row);
    console.log(`| goal at 10 000 | | ≤ 2 s (p99) | | | | | ≤ 200 ms | ≤ 200 ms | ≤ 200 ms | | ≤ 1024 MB | | |`);
  } finally {
    server.child.kill('SIGTERM');
    await new Promise((resolve) => { if (server.child.exitCode !== null) resolve(null); else server.child.once('exit', resolve); });
    await emulator.close();
    await scratch?.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The n-th run: a service now and then, else a task that prints a line a second until stopped. */
function runSpec(n: number): { spec: Record<string, unknown>; files?: typeof FILES } {
  if (n % SERVICE_EVERY === SERVICE_EVERY - 1) {
    return { spec: { type: 'service', name: `s${n}`, port: 8000, commands: ['serve --port $PORT'], resources: { gpu: 0 }, probes: [{ type: 'http', url: '/health', interval: '10s' }] } };
  }
  return { spec: { type: 'task', name: `t${n}`, commands: ['while true; do echo "line of $ORCHESTRATOR_RUN_NAME"; sleep 1; done'], resources: { gpu: 0 } }, ...(FILES && { files: FILES }) };
}

await main();
