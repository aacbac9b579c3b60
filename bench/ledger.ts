/**
 * Ledger benchmark: what keeping the ledger costs at scale.
 *
 *   npm run bench:ledger                 # embedded PGlite, as `orchestrator server` runs by default
 *   npm run bench:ledger -- --postgres   # against ORCHESTRATOR_TEST_POSTGRES_URL (default: local Postgres)
 *
 * 1. 1 000 running instances, each held by a run: the ledger's count of all of them (store/ledger.ts#accrue and rollDays,
 *    every 15 s, so 4 a minute), as CPU per minute beside a goal of under 1% of one core.
 * 2. `orchestrator cost --by run --month 2026-11` (GET /costs through the HTTP API) over a month of 100 000 runs on those
 *    instances, each holding one for part of an hour, the rest of each hour idle: beside a goal of under 500 ms.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_ACCRUAL_INTERVAL_MS } from '../controllers/ledger-controller.js';
import { startServer } from '../server/server.js';
import type { Db } from '../store/db.js';
import { accrue, rollDays } from '../store/ledger.js';
import { openDatabase } from '../store/open.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { createScratchDatabase } from '../test/helpers/databases.js';
import { median } from './quantiles.js';

const INSTANCES = 1000;
const RUNS = 100_000;
const MONTH = '2026-11';
const COUNTS_PER_MINUTE = 60_000 / DEFAULT_ACCRUAL_INTERVAL_MS;
const usePostgres = process.argv.includes('--postgres');

const ms = (n: number) => `${n.toFixed(1)} ms`;

/** A project with one fleet of `INSTANCES` busy H100 instances, each held by a running run, their accounts open. */
async function populate(db: Db): Promise<void> {
  const project = await upsertProject(db, 'main', [{ type: 'local' } as never]);
  const user = await upsertUser(db, 'bench', 'bench-token-0123456789', 'user');
  const offer = { backend: 'gpucloud', offerId: 'h100-x1', gpu: { name: 'H100', memoryMib: 81920, count: 1 }, cpus: 26, memoryMib: 230400, diskMib: 1024000, region: 'us-east-1', pricePerHour: 2.5, availability: 'available' };
  const requirement = { gpu: { models: ['H100'], memoryMib: { min: null, max: null }, count: { min: 1, max: 1 } }, cpus: { min: null, max: null }, memoryMib: { min: null, max: null }, diskMib: { min: null, max: null }, shmSizeMib: null };
  await db.query(
    `INSERT INTO fleets (id, project_id, name, spec, requirement, nodes_min, nodes_max, backends, status)
     VALUES ('bench-fleet', $1, 'h100', '{}', $2, 0, NULL, '["gpucloud"]', 'active')`, [project.id, requirement]);
  await db.query(
    `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, offer, agent_token, status, provisioning_started_at)
     SELECT 'i-' || n, $1, 'bench-fleet', 'h100-' || n, 'gpucloud', $2, $3, 'token', 'busy', now() - interval '1 hour'
     FROM generate_series(1, $4::int) n`, [project.id, requirement, offer, INSTANCES]);
  // The month's runs: run r held instance r % INSTANCES for part of hour r % 720 of the month.
  await db.query(
    `INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status, fleet_id, instance_id, submitted_at, finished_at)
     SELECT 'r-' || n, $1, $2, 'run-' || n, 'task', '{}', $3, 'done', 'bench-fleet', 'i-' || (n % $5 + 1),
       $6::timestamptz + (n % 720) * interval '1 hour', $6::timestamptz + (n % 720) * interval '1 hour' + interval '20 minutes'
     FROM generate_series(1, $4::int) n`, [project.id, user.id, requirement, RUNS, INSTANCES, `${MONTH}-01T00:00:00Z`]);
  await db.query(
    `INSERT INTO cost_hours (hour, instance_id, run_id, project_id, seconds, dollars)
     SELECT $3::timestamptz + (n % 720) * interval '1 hour', 'i-' || (n % $2 + 1), 'r-' || n, $1, 1200, 1200 * 2.5 / 3600
     FROM generate_series(1, $4::int) n
     ON CONFLICT ON CONSTRAINT cost_hours_pkey DO UPDATE SET seconds = cost_hours.seconds + excluded.seconds, dollars = cost_hours.dollars + excluded.dollars`,
    [project.id, INSTANCES, `${MONTH}-01T00:00:00Z`, RUNS]);
  await db.query(
    `INSERT INTO cost_hours (hour, instance_id, run_id, project_id, seconds, dollars)
     SELECT DISTINCT hour, instance_id, '', project_id, 2400, 2400 * 2.5 / 3600 FROM cost_hours`);
  // Now: every instance busy with a run of its own, its account open since a moment ago.
  await db.query(`UPDATE instances SET run_id = 'r-' || substr(id, 3) WHERE id LIKE 'i-%'`);
  await db.query(
    `INSERT INTO instance_accruals (instance_id, price_per_hour, started_at, accrued_until)
     SELECT id, 2.5, now() - interval '1 hour', now() - interval '5 seconds' FROM instances`);
  // The month's pieces are done with: they are added to their days once, as the ledger does hour by hour.
  await rollDays(db);
  await db.query('ANALYZE');
}

async function accrualPerMinute(db: Db): Promise<void> {
  const times: number[] = [];
  const cpuStart = process.cpuUsage();
  for (let i = 0; i < COUNTS_PER_MINUTE; i++) {
    const started = performance.now();
    const counted = await accrue(db);
    await rollDays(db);
    times.push(performance.now() - started);
    if (counted !== INSTANCES) throw new Error(`counted ${counted} of ${INSTANCES} instances`);
  }
  // Between counts, the ledger controller looks each second (the manager's loop) for instances that have just ended.
  let looks = 0;
  for (let i = 0; i < 60 - COUNTS_PER_MINUTE; i++) {
    const started = performance.now();
    await accrue(db, { endedOnly: true });
    looks += performance.now() - started;
  }
  const cpu = process.cpuUsage(cpuStart);
  const wall = times.reduce((a, b) => a + b, 0) + looks;
  const cpuMs = (cpu.user + cpu.system) / 1000;
  // PGlite runs in this process, so its CPU is ours; PostgreSQL's runs in its own, so the wall time stands for both.
  const perMinute = usePostgres ? wall : cpuMs;
  console.log(`1. ledger counts of ${INSTANCES} running instances: ${COUNTS_PER_MINUTE} a minute (every ${DEFAULT_ACCRUAL_INTERVAL_MS / 1000} s), median ${ms(median(times))} each, and ${60 - COUNTS_PER_MINUTE} looks for ended ones, ${ms(looks / (60 - COUNTS_PER_MINUTE))} each`);
  console.log(`   ${usePostgres ? 'wall time (this process and the database)' : 'CPU (this process, the database included)'} per minute: ${ms(perMinute)} = ${((perMinute / 60_000) * 100).toFixed(2)}% of one core   (goal: under 1%)`);
}

async function costByRun(url: string, token: string, all: boolean): Promise<void> {
  const times: number[] = [];
  const cpuTimes: number[] = [];
  let rows = 0;
  let bytes = 0;
  for (let i = -1; i < 5; i++) {
    const started = performance.now();
    const cpuStart = process.cpuUsage();
    const response = await fetch(`${url}/api/projects/main/costs?by=run&month=${MONTH}${all ? '&limit=0' : ''}`, { headers: { authorization: `Bearer ${token}` } });
    const text = await response.text();
    const cpu = process.cpuUsage(cpuStart);
    if (i >= 0) times.push(performance.now() - started);
    if (i >= 0) cpuTimes.push((cpu.user + cpu.system) / 1000);
    if (response.status !== 200) throw new Error(`GET /costs answered ${response.status}: ${text.slice(0, 200)}`);
    rows = (JSON.parse(text) as { rows: unknown[] }).rows.length;
    bytes = text.length;
  }
  const command = `cost --by run --month ${MONTH}${all ? ' --limit 0' : ''}`;
  // On PGlite the server and its database run in this process: its CPU time is the request's work, however loaded the machine.
  const cpu = usePostgres ? '' : `, CPU ${ms(median(cpuTimes))}`;
  console.log(`   ${command.padEnd(40)} ${rows.toLocaleString('en').padStart(7)} rows, ${(bytes / 1e6).toFixed(2)} MB of JSON: median of 5 (after one to warm up) ${ms(median(times))}${cpu}   (goal: under 500 ms)`);
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'orch-bench-ledger-'));
  const scratch = usePostgres ? await createScratchDatabase() : null;
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'config.yml'), 'projects:\n- name: main\n  backends:\n  - type: local\n');
    const db = await openDatabase({ url: scratch?.url, dataDir: join(dir, 'data') });
    console.log(`ledger benchmark on ${usePostgres ? 'PostgreSQL' : 'PGlite'}: populating ${INSTANCES} instances and ${RUNS.toLocaleString('en')} runs…`);
    await populate(db);
    await accrualPerMinute(db);
    // The server that answers the report has nothing to look after: the instances have ended, their accounts closed.
    await db.query(`UPDATE instances SET status = 'terminated', terminated_at = now(), run_id = NULL`);
    await accrue(db);
    await rollDays(db);
    await db.close();
    const server = await startServer({ port: 0, dir, databaseUrl: scratch?.url, adminToken: 'bench-admin-token-0123', logLevel: 'error', ledgerIntervalMs: 3_600_000 });
    try {
      console.log(`2. the report of a month of ${RUNS.toLocaleString('en')} runs through GET /costs:`);
      await costByRun(server.url, server.adminToken, false);
      await costByRun(server.url, server.adminToken, true);
    } finally {
      await server.close();
    }
  } finally {
    await scratch?.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
