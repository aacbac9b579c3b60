/**
 * Control-plane benchmark: how fast an applied task reaches `running` on an idle instance, how long
 * 500 tasks take on 50 instances (their agents real processes on this machine, then simulated in the benchmark's
 * process), how long one scheduling pass over 10 000 queued runs takes, and how long the run list
 * (`orchestrator ps`) takes beside those 10 000 and 200 services.
 *
 *   npm run bench                 # embedded PGlite, as `orchestrator server` runs by default
 *   npm run bench -- --postgres   # against ORCHESTRATOR_TEST_POSTGRES_URL (default: local Postgres)
 *   npm run bench -- --listing-only   # the run list alone, and the views an apply of 100 runs answers with
 *   npm run bench -- --scheduler-only # the scheduling pass over 10 000 queued runs alone
 *   npm run bench -- --apply-only     # apply → running and the burst alone (the burst with real agents, then simulated ones)
 *   npm run bench -- --apply-only --trace   # and the server's statements per task, the most frequent first
 *
 * Each figure is printed beside a reference measured in the same process (the floor the control
 * plane adds to), and beside dstack's published 1–2 s from apply to running on an idle instance, as a label only:
 * that figure was measured on other machines, so no ratio to ours is printed.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient } from '../agent/client.js';
import { normalizeResources } from '../api/resources.js';
import { startEmulator } from '../backends/gpucloud/emulator.js';
import { BackendPool } from '../controllers/backend-pool.js';
import { Scheduler } from '../controllers/scheduler.js';
import type { Db, Queryable } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { openDatabase } from '../store/open.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { getRunView, listRunViews, runViewsOf } from '../store/run-views.js';
import { insertRun } from '../store/runs.js';
import { insertReplica } from '../store/services.js';
import { startServer } from '../server/server.js';
import { createScratchDatabase } from '../test/helpers/databases.js';
import { statCpuSeconds } from './process-cpu.js';
import { projectApi } from './project-api.js';
import { quantile } from './quantiles.js';

const flag = (name: string, fallback: number) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
};
const INSTANCES = flag('instances', 50);
const TASKS = flag('tasks', 500);
const QUEUED = 10_000;
/** Runs in one `POST /apply` whose answer's views are read beside the queue (bench/scale.ts applies 100 at a time). */
const APPLIED = 100;
const SERVICES = 200;
const REPLICAS = 2;
const PACED_INTERVAL_MS = 40;
const DSTACK_APPLY_TO_RUNNING_S = '1–2';

const usePostgres = process.argv.includes('--postgres');
const TRACE = process.argv.includes('--trace');

const ms = (n: number) => `${n.toFixed(1)} ms`;
const sleep = (n: number) => new Promise((r) => setTimeout(r, n));

async function database(): Promise<{ url?: string; drop(): Promise<void> }> {
  if (!usePostgres) return { drop: async () => {} };
  return createScratchDatabase();
}

type Api = (method: string, path: string, body?: unknown) => Promise<any>;

/** How the emulated instances' agents run: as real processes on this machine, or simulated in this process. */
type Agents = { kind: 'process' } | { kind: 'simulated'; startMs: number };

/**
 * Apply → running paced, then the burst, with every agent a real process sharing this machine's two cores with the
 * server; then the burst again with the agents simulated in this process, each job running as long after its submission
 * as the real agent alone took here: the control plane's own share, as it is where each agent has a machine of its own.
 */
async function applyToRunning(): Promise<void> {
  const agentFloor = await withIdleFleet({ kind: 'process' }, async (api, db) => {
    const floor = await directAgentFloor(db);
    const statements = traceStatements(db);
    const cpu = cpuPerTask();

    const names: string[] = [];
    const started = Date.now();
    for (let i = 0; i < TASKS; i++) {
      const name = `t${i}`;
      names.push(name);
      void api('POST', '/runs/apply', { spec: { type: 'task', name, commands: ['true'] } });
      await sleep(PACED_INTERVAL_MS);
    }
    await allEnded(db, names);
    const wall = Date.now() - started;
    const runs: any[] = await api('GET', '/runs?all=true');
    const latencies = runs.filter((r) => names.includes(r.name)).map((r) => new Date(r.startedAt).getTime() - new Date(r.submittedAt).getTime());
    const failed = runs.filter((r) => names.includes(r.name) && r.status !== 'done').length;
    const p50 = quantile(latencies, 0.5);
    const p99 = quantile(latencies, 0.99);
    console.log(`apply accepted → job running: p50 ${ms(p50)}, p99 ${ms(p99)} (submitted one every ${PACED_INTERVAL_MS} ms; ${failed} not done)`);
    console.log(`  reference, same process: submit straight to an idle agent → running: p50 ${ms(floor)}; control plane adds ${ms(p50 - floor)} (ratio ${(p50 / floor).toFixed(1)}x)`);
    console.log(`  dstack: ${DSTACK_APPLY_TO_RUNNING_S} s as its project publishes it, measured elsewhere, not here (no ratio to ours); target p50 < 250 ms: ${p50 < 250 ? 'met' : 'NOT met'}`);
    console.log(`all ${TASKS} finished ${((wall) / 1000).toFixed(1)} s after the first apply (the paced submission alone takes ${(TASKS * PACED_INTERVAL_MS / 1000).toFixed(1)} s)`);
    await printSteps(db, names);
    cpu.print(TASKS);
    statements.print(TASKS);

    await burst(api, db, cpu, statements);
    return floor;
  });
  const startMs = Math.max(1, Math.round(agentFloor));
  console.log(`\n## the burst again, the agents simulated in this process (each job running ${startMs} ms after its submission, as the real agent alone took above): the control plane's own share`);
  await withIdleFleet({ kind: 'simulated', startMs }, (api, db) => burst(api, db, cpuPerTask('this process (the server and the simulated agents)'), traceStatements(db)));
}

/** TASKS tasks applied at once, until all have ended. */
async function burst(api: Api, db: Db, cpu: ReturnType<typeof cpuPerTask>, statements: ReturnType<typeof traceStatements>): Promise<void> {
  const names = Array.from({ length: TASKS }, (_, i) => `b${i}`);
  const started = Date.now();
  await Promise.all(names.map((name) => api('POST', '/runs/apply', { spec: { type: 'task', name, commands: ['true'] } })));
  await allEnded(db, names);
  const seconds = (Date.now() - started) / 1000;
  console.log(`burst: ${TASKS} applied at once finish in ${seconds.toFixed(1)} s on ${INSTANCES} instances; goal ≤ 5 s: ${seconds <= 5 ? 'met' : 'NOT met'}`);
  await printTurns(db, names);
  cpu.print(TASKS);
  statements.print(TASKS);
}

/** A server on a new database with a gpucloud fleet of INSTANCES idle instances, for `work`; all of it gone after. */
async function withIdleFleet<T>(agents: Agents, work: (api: Api, db: Db) => Promise<T>): Promise<T> {
  const emulator = await startEmulator({
    port: 0, bootDelayMs: 0, capacity: { L4: INSTANCES },
    ...agents.kind === 'process' ? { agentRuntime: 'process' } : { agents: 'simulated', simulated: { startMs: agents.startMs } },
  });
  const dir = mkdtempSync(join(tmpdir(), 'orch-bench-'));
  writeFileSync(join(dir, 'config.yml'), `projects:\n- name: main\n  backends:\n  - type: gpucloud\n    api_url: ${emulator.url}\n    creds:\n      type: api_key\n      api_key: ${emulator.apiKey}\n`);
  const scratch = await database();
  const server = await startServer({ port: 0, dir, databaseUrl: scratch.url, adminToken: 'bench-token', logLevel: 'error', controllerIntervalMs: 1000 });
  const api: Api = async (method, path, body) => JSON.parse((await projectApi(server.url, 'bench-token', method, path, body)).text);
  try {
    if (agents.kind === 'process') console.log(`\n## ${TASKS} tasks on ${INSTANCES} idle gpucloud-emulator instances (${server.db.driver})`);
    const bootStart = Date.now();
    await api('POST', '/fleets/apply', { spec: { type: 'fleet', name: 'bench', backends: ['gpucloud'], nodes: `${INSTANCES}..${INSTANCES}`, idle_duration: 'off', resources: { gpu: 'L4:1' } } });
    for (;;) {
      const instances = await api('GET', '/instances');
      if (instances.filter((i: { status: string }) => i.status === 'idle').length === INSTANCES) break;
      await sleep(500);
    }
    console.log(`fleet of ${INSTANCES} instances idle after ${((Date.now() - bootStart) / 1000).toFixed(1)} s`);
    const result = await work(api, server.db);
    await api('DELETE', '/fleets/bench');
    for (;;) {
      const instances = await api('GET', '/instances');
      if (instances.length === 0) break;
      await sleep(500);
    }
    return result;
  } finally {
    await server.close();
    await emulator.close();
    await scratch.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Waits until every named run has ended, asking the database (one narrow count) rather than listing every run through
 * the API: on PGlite's one connection that list, four times a second over up to 1000 runs, queued before the
 * controllers' statements and slowed what is measured.
 */
async function allEnded(db: Db, names: string[]): Promise<void> {
  for (;;) {
    const [{ ended }] = await db.query<{ ended: number }>(
      `SELECT count(*)::int AS ended FROM runs WHERE name = ANY($1::text[]) AND NOT deleted AND status IN ('done', 'failed', 'terminated')`, [names]);
    if (ended === names.length) return;
    await sleep(250);
  }
}

/**
 * The CPU spent since the last print, a task: this process (the server, on PGlite its database, the emulator), the
 * agents' processes with the jobs they ran, and PostgreSQL's processes (all of the local cluster's). The agents share
 * the machine's cores with the server here, where each would have its own machine.
 */
function cpuPerTask(server = "the server's process"): { print(tasks: number): void } {
  const agents = (command: string) => command.includes('\0agent\0') && command.includes('--instance-id');
  const postgresProcesses = (command: string) => command.startsWith('postgres');
  let since = process.cpuUsage();
  let agentsSince = processesCpuMs(agents);
  let postgresSince = processesCpuMs(postgresProcesses);
  return {
    print(tasks) {
      const used = process.cpuUsage(since);
      const agentsNow = processesCpuMs(agents);
      const postgresNow = processesCpuMs(postgresProcesses);
      const of = (now: Map<number, number>, before: Map<number, number>) => [...now].reduce((sum, [pid, cpuMs]) => sum + cpuMs - (before.get(pid) ?? 0), 0) / tasks;
      console.log(`  CPU a task: ${server} ${ms((used.user + used.system) / 1000 / tasks)}, the agents (their jobs included) ${ms(of(agentsNow, agentsSince))}, PostgreSQL's processes ${ms(of(postgresNow, postgresSince))}`);
      since = process.cpuUsage();
      agentsSince = agentsNow;
      postgresSince = postgresNow;
    },
  };
}

/** The CPU milliseconds (their reaped children's included) of each live process whose command line matches, by pid. */
function processesCpuMs(matches: (command: string) => boolean): Map<number, number> {
  const cpu = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!matches(readFileSync(`/proc/${entry}/cmdline`, 'utf8'))) continue;
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      cpu.set(Number(entry), (statCpuSeconds(stat) + statCpuSeconds(stat, 'children')) * 1000);
    } catch {
      // gone meanwhile
    }
  }
  return cpu;
}

/**
 * Where an instance's turn goes in the burst, p50 of each: placed → running (the start), running → ended (the job and
 * the watch seeing its end), ended → the instance's next run placed.
 */
async function printTurns(db: Db, names: string[]): Promise<void> {
  const rows = await db.query<{ instance_id: string; placed: Date; started_at: Date; finished_at: Date }>(
    `SELECT r.instance_id, e.created_at AS placed, r.started_at, r.finished_at
     FROM runs r JOIN events e ON e.object_id = r.id AND e.reason = 'Provisioning' WHERE r.name = ANY($1::text[]) AND r.started_at IS NOT NULL`, [names]);
  const byInstance = new Map<string, typeof rows>();
  for (const row of rows) byInstance.set(row.instance_id, [...(byInstance.get(row.instance_id) ?? []), row]);
  const gaps = [...byInstance.values()].flatMap((turns) => {
    const sorted = turns.sort((a, b) => a.placed.getTime() - b.placed.getTime());
    return sorted.slice(1).map((turn, index) => turn.placed.getTime() - sorted[index]!.finished_at.getTime());
  });
  const p50 = (values: number[]) => ms(quantile(values, 0.5));
  console.log(`  an instance's turn, p50: placed → running ${p50(rows.map((r) => r.started_at.getTime() - r.placed.getTime()))}, running → ended ${p50(rows.map((r) => r.finished_at.getTime() - r.started_at.getTime()))}, ended → its next run placed ${p50(gaps)} (p90 ${ms(quantile(gaps, 0.9))})`);
}

/**
 * apply → running in its steps, p50 of each: accepted (`submitted_at`) → placed (the scheduler's `Provisioning` event,
 * stamped when its transaction began) → running (`started_at`, once the agent answered the submit).
 */
async function printSteps(db: Db, names: string[]): Promise<void> {
  const rows = await db.query<{ placed: number; started: number }>(
    `SELECT EXTRACT(EPOCH FROM e.created_at - r.submitted_at) * 1000 AS placed, EXTRACT(EPOCH FROM r.started_at - e.created_at) * 1000 AS started
     FROM runs r JOIN events e ON e.object_id = r.id AND e.reason = 'Provisioning' WHERE r.name = ANY($1::text[]) AND r.started_at IS NOT NULL`, [names]);
  console.log(`  its steps, p50: accepted → placed ${ms(quantile(rows.map((r) => Number(r.placed)), 0.5))}, placed → running ${ms(quantile(rows.map((r) => Number(r.started)), 0.5))} (the agent's submit included)`);
}

/** With --trace, counts the statements the server makes (the bench's own polling of the API included), by their text. */
function traceStatements(db: Db): { print(tasks: number): void } {
  const counts = new Map<string, number>();
  if (!TRACE) return { print: () => {} };
  const count = (key: string) => counts.set(key, (counts.get(key) ?? 0) + 1);
  const counted = (q: Queryable): Queryable['query'] => {
    const query = q.query.bind(q);
    return (sql, params) => {
      count(sql.replace(/\s+/g, ' ').slice(0, 110));
      return query(sql, params);
    };
  };
  // Requests' statements and the controllers' come through two handles.
  for (const handle of [db, db.background]) {
    const mutable = handle as { -readonly [K in keyof Db]: Db[K] };
    mutable.query = counted(handle);
    const transaction = handle.transaction.bind(handle);
    mutable.transaction = (fn) => { count('BEGIN … COMMIT'); return transaction((tx) => fn({ query: counted(tx) })); };
    const notify = handle.notify.bind(handle);
    mutable.notify = (channel, payload) => { count(`NOTIFY ${channel}`); return notify(channel, payload); };
  }
  return {
    print(tasks) {
      const total = [...counts.values()].reduce((a, b) => a + b, 0);
      console.log(`  statements: ${total} (${(total / tasks).toFixed(1)} a task, transactions and NOTIFYs counted as one each), the most frequent:`);
      for (const [key, n] of [...counts].sort((a, b) => b[1] - a[1]).slice(0, 14)) console.log(`    ${String(n).padStart(6)}  ${key}`);
      counts.clear();
    },
  };
}

/** The floor under apply → running: one job submitted straight to an idle instance's agent. */
async function directAgentFloor(db: Db): Promise<number> {
  const [instance] = await db.query(`SELECT agent_url, agent_token FROM instances WHERE status = 'idle' LIMIT 1`);
  const agent = new AgentClient(instance.agent_url, instance.agent_token);
  const samples: number[] = [];
  for (let i = 0; i < 30; i++) {
    const jobId = `floor-${i}`;
    const t0 = performance.now();
    const status = await agent.submit({ jobId, runName: jobId, commands: ['true'], env: {}, files: [], ports: [], gpus: 1 });
    if (status.state === 'pending') while ((await agent.job(jobId)).state === 'pending') await sleep(1);
    samples.push(performance.now() - t0);
    while (!['exited', 'failed', 'stopped'].includes((await agent.job(jobId)).state)) await sleep(5);
    await agent.remove(jobId);
  }
  return quantile(samples, 0.5);
}

async function schedulerPass(): Promise<void> {
  const scratch = await database();
  const db = await openDatabase({ url: scratch.url });
  const dir = mkdtempSync(join(tmpdir(), 'orch-bench-'));
  try {
    console.log(`\n## one scheduling pass over ${QUEUED} queued runs (${db.driver})`);
    const project = await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }]);
    const user = await upsertUser(db, 'bench', 'bench-token', 'admin');
    await applyFleet(db, project.id, { name: 'full', spec: {}, requirement: normalizeResources(undefined, 'fleet'), nodesMin: 0, nodesMax: 0, idleSeconds: null, backends: ['local'] });
    const requirement = normalizeResources(undefined, 'run');
    await db.transaction(async (tx) => {
      for (let i = 0; i < QUEUED; i++) {
        await insertRun(tx, { projectId: project.id, userId: user.id, name: `q${i}`, kind: 'task', spec: { type: 'task', commands: ['true'] }, files: [], requirement, priority: i % 3 });
      }
    });
    const scheduler = new Scheduler(db, new BackendPool(db, join(dir, 'backends')));
    const cpu: number[] = [];
    const timed = async () => {
      const t0 = performance.now();
      const cpu0 = process.cpuUsage();
      await scheduler.pass();
      const used = process.cpuUsage(cpu0);
      cpu.push((used.user + used.system) / 1000);
      return performance.now() - t0;
    };
    const first = await timed();
    const steady: number[] = [];
    for (let i = 0; i < 5; i++) steady.push(await timed());
    const reference: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t0 = performance.now();
      await db.query(`SELECT id, project_id, name, requirement, desired, status_message FROM runs WHERE status = 'submitted' ORDER BY priority DESC, submitted_at, id`);
      reference.push(performance.now() - t0);
    }
    const [{ waiting }] = await db.query(`SELECT count(*)::int AS waiting FROM runs WHERE status = 'submitted' AND status_message LIKE 'waiting: fleet full is at its maximum%'`);
    const median = quantile(steady, 0.5);
    const floor = quantile(reference, 0.5);
    console.log(`first pass (writes ${waiting} queue reasons): ${ms(first)}`);
    // PGlite runs in this process, so its CPU is the pass's work however loaded the machine; PostgreSQL's backend is not in it.
    console.log(`steady pass, median of 5: ${ms(median)}; CPU of this process ${ms(quantile(cpu.slice(1), 0.5))}${db.driver === 'pglite' ? ' (the database included)' : ' (the database not included)'}`);
    console.log(`  reference, same process: reading the ${QUEUED} queued rows alone: median ${ms(floor)} (ratio ${(median / floor).toFixed(1)}x)`);
  } finally {
    await db.close();
    await scratch.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `orchestrator ps`: the run list of a project with a long queue and many services, beside reading its rows alone. */
async function listingRuns(): Promise<void> {
  const scratch = await database();
  const db = await openDatabase({ url: scratch.url });
  try {
    console.log(`\n## listing runs (ps) with ${QUEUED} queued runs and ${SERVICES} services of ${REPLICAS} replicas (${db.driver})`);
    const project = await upsertProject(db, 'main', [{ type: 'local', runtime: 'process' }]);
    const user = await upsertUser(db, 'bench', 'bench-token', 'admin');
    const requirement = normalizeResources(undefined, 'run');
    await db.transaction(async (tx) => {
      for (let i = 0; i < QUEUED; i++) {
        await insertRun(tx, { projectId: project.id, userId: user.id, name: `q${i}`, kind: 'task', spec: { type: 'task', commands: ['true'] }, files: [], requirement, priority: i % 3 });
      }
      for (let i = 0; i < SERVICES; i++) {
        const service = await insertRun(tx, { projectId: project.id, userId: user.id, name: `s${i}`, kind: 'service', spec: { type: 'service', port: 8000, commands: ['true'] }, files: [], requirement, priority: 0 });
        for (let replica = 0; replica < REPLICAS; replica++) await insertReplica(tx, service!, replica, null);
      }
    });
    const median = async (work: () => Promise<unknown>) => {
      const times: number[] = [];
      for (let i = 0; i < 5; i++) {
        const t0 = performance.now();
        await work();
        times.push(performance.now() - t0);
      }
      return quantile(times, 0.5);
    };
    const listed = await median(() => listRunViews(db, project.id, false, 1000));
    const floor = await median(() => db.query(`SELECT * FROM runs WHERE project_id = $1 AND NOT deleted AND service_id IS NULL ORDER BY submitted_at DESC LIMIT 1000`, [project.id]));
    console.log(`the 1000 newest live runs, each with its queue position, replicas and SSH hosts: median of 5 ${ms(listed)}`);
    console.log(`  reference, same process: reading those 1000 rows alone: median ${ms(floor)} (ratio ${(listed / floor).toFixed(1)}x)`);
    const applied = (await db.query<{ id: string }>(`SELECT id FROM runs WHERE project_id = $1 AND status = 'submitted' ORDER BY submitted_at DESC LIMIT ${APPLIED}`, [project.id])).map((r) => r.id);
    const together = await median(() => runViewsOf(db, applied));
    const alone = await median(() => Promise.all(applied.map((id) => getRunView(db, id))));
    console.log(`the views an apply of ${APPLIED} queued runs answers with, read together: median of 5 ${ms(together)}`);
    console.log(`  reference, same process: each view read alone (as apply read them before): median ${ms(alone)} (ratio ${(alone / together).toFixed(1)}x)`);
  } finally {
    await db.close();
    await scratch.drop();
  }
}

console.log(`# control-plane benchmark (${usePostgres ? 'postgres' : 'pglite'})`);
if (process.argv.includes('--scheduler-only')) {
  await schedulerPass();
} else {
  if (!process.argv.includes('--listing-only')) {
    await applyToRunning();
    if (process.argv.includes('--apply-only')) process.exit(0);
    await schedulerPass();
  }
  await listingRuns();
}
process.exit(0);
