/**
 * Log benchmark: a task prints LINES lines as fast as it can on the local backend (process runtime);
 * how fast the server ingests them, how soon after the last line the run is done, and how long
 * `orchestrator logs RUN` takes to read them all back.
 *
 *   npm run bench:logs                 # embedded PGlite
 *   npm run bench:logs -- --postgres   # a scratch database on the local PostgreSQL
 *   npm run bench:logs -- --lines 200000
 *
 * References, measured in the same run: the same command writing the same lines to a file (the
 * job's own speed), and `cat` reading that file back (disk speed).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer } from '../server/server.js';
import { createScratchDatabase } from '../test/helpers/databases.js';

/** The built command beside this file in dist/. */
const CLI_MAIN = join(dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'main.js');
const at = process.argv.indexOf('--lines');
const LINES = at === -1 ? 1_000_000 : Number(process.argv[at + 1]);
const usePostgres = process.argv.includes('--postgres');
const PROGRAM = `awk 'BEGIN { for (i = 1; i <= ${LINES}; i++) printf "step %d loss=0.%06d lr=3e-4 tokens/s=12345\\n", i, i }'`;

const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const rate = (lines: number, ms: number) => `${Math.round(lines / (ms / 1000)).toLocaleString('en-US')} lines/s`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The server runs in this process, so commands run asynchronously: a blocking one would stall it. */
const shell = promisify(execFile);

async function timed(command: string, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const started = process.hrtime.bigint();
  await shell('/bin/sh', ['-c', command], { env, maxBuffer: 1024 * 1024 });
  return Number(process.hrtime.bigint() - started) / 1e6;
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'orch-bench-logs-'));
  const home = mkdtempSync(join(tmpdir(), 'orch-bench-home-'));
  // The run keeps every line, so that the figures measure ingest rather than the per-run limit.
  writeFileSync(join(dir, 'config.yml'), 'projects:\n- name: main\n  backends:\n  - type: local\n    runtime: process\nlogs:\n  max_size_per_run: 4GB\n');
  const scratch = usePostgres ? await createScratchDatabase() : null;
  const server = await startServer({ port: 0, dir, databaseUrl: scratch?.url, adminToken: 'bench-token', logLevel: 'error' });
  const api = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${server.url}/api/projects/main${path}`, { method, headers: { authorization: 'Bearer bench-token' }, body: body ? JSON.stringify(body) : undefined });
    return response.json() as Promise<any>;
  };
  try {
    console.log(`## ${LINES.toLocaleString('en-US')} lines from one task (${server.db.driver})`);
    const file = join(dir, 'reference.log');
    const writeMs = await timed(`${PROGRAM} > ${file}`);
    const bytes = statSync(file).size;
    const catMs = await timed(`cat ${file} > /dev/null`);
    console.log(`reference: the command writes them to a file in ${seconds(writeMs)} (${rate(LINES, writeMs)}, ${(bytes / 1e6).toFixed(0)} MB); cat reads them back in ${seconds(catMs)}`);

    await api('POST', '/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '1..1' } });
    await api('POST', '/runs/apply', { spec: { type: 'task', name: 'chatty', commands: [PROGRAM] } });
    let run: any;
    for (;;) {
      run = await api('GET', '/runs/chatty');
      if (['done', 'failed', 'terminated'].includes(run.status)) break;
      await sleep(50);
    }
    if (run.status !== 'done') throw new Error(`the task ended ${run.status}: ${run.statusMessage}`);
    const first = (await api('GET', '/runs/chatty/logs?after=0')).lines[0];
    const last = (await api('GET', `/runs/chatty/logs?after=${LINES - 1}`)).lines[0];
    const finishedAt = Date.parse(run.finishedAt);
    const ingestMs = finishedAt - Date.parse(first.ts);
    console.log(`ingest: ${LINES.toLocaleString('en-US')} lines stored ${seconds(ingestMs)} after the first was printed: ${rate(LINES, ingestMs)} (${(writeMs / ingestMs).toFixed(2)}x the file's speed)`);
    console.log(`done ${seconds(finishedAt - Date.parse(last.ts))} after the last line was printed`);

    const env = { ...process.env, HOME: home };
    await shell('node', [CLI_MAIN, 'project', 'add', '--name', 'main', '--url', server.url, '--token', 'bench-token', '--default'], { env });
    const readMs = await timed(`node ${CLI_MAIN} logs chatty > ${join(dir, 'read.log')}`, env);
    const readBytes = statSync(join(dir, 'read.log')).size;
    console.log(`read back: orchestrator logs chatty took ${seconds(readMs)} (${rate(LINES, readMs)}; ${(readMs / catMs).toFixed(1)}x cat), ${readBytes === bytes ? 'identical size' : `${readBytes} bytes instead of ${bytes}`}`);
  } finally {
    await api('DELETE', '/fleets/local').catch(() => {});
    await sleep(2000);
    await server.close();
    await scratch?.drop();
    rmSync(dir, { recursive: true, force: true });
    rmSync(home, { recursive: true, force: true });
  }
}

await main();
