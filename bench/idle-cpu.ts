/**
 * The idle server's CPU: `orchestrator server` on the embedded database, with nothing applied, with an idle fleet
 * instance, and with one service replica running and no request coming, read from /proc over a window in each state.
 *
 *   npm run bench:idle                                    # this build, 3 rounds, 15 s windows
 *   npm run bench:idle -- --compare-cli OLD/dist/cli/main.js --rounds 3 --seconds 15
 *
 * With --compare-cli the two builds run in turn, round after round, so that both see the same load on a shared machine;
 * each figure is the median over the rounds. Reference: the load average, printed beside.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../test/helpers/ports.js';
import { cpuSeconds } from './process-cpu.js';
import { median } from './quantiles.js';

const flag = (name: string) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? undefined : process.argv[at + 1];
};
const ROUNDS = Number(flag('rounds') ?? 3);
const SECONDS = Number(flag('seconds') ?? 15);
const CLIS = [join(dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'main.js'), ...(flag('compare-cli') ? [flag('compare-cli')!] : [])];
const STATES = ['nothing applied', 'an idle fleet instance', 'one service replica, no traffic'] as const;
const TOKEN = 'idle-bench-token';
const UPSTREAM = `require('node:http').createServer((q, s) => s.end('ok')).listen(Number(process.env.PORT))`;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 180_000): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; !(await check().catch(() => false));) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${timeoutMs / 1000} s`);
    await sleep(250);
  }
}

/** CPU milliseconds per second the process used over the window, after a moment to settle. */
async function cpuPerSecond(pid: number): Promise<number> {
  await sleep(3000);
  const [c0, t0] = [cpuSeconds(pid), performance.now()];
  await sleep(SECONDS * 1000);
  return ((cpuSeconds(pid) - c0) * 1000) / ((performance.now() - t0) / 1000);
}

/** One server of the build, taken through the three states; its CPU per second in each. */
async function round(cli: string): Promise<number[]> {
  const dir = mkdtempSync(join(tmpdir(), 'orch-idle-bench-'));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child: ChildProcess = spawn(process.execPath, [cli, 'server', '--port', String(port), '--server-dir', dir], {
    env: { ...process.env, ORCHESTRATOR_SERVER_ADMIN_TOKEN: TOKEN, ORCHESTRATOR_DATABASE_URL: '' }, stdio: 'ignore',
  });
  const api = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${url}/api${path}`, {
      method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const answer = await response.json() as any;
    if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${JSON.stringify(answer)}`);
    return answer;
  };
  try {
    await until('the server to serve', async () => (await api('GET', '/projects')) !== undefined, 60_000);
    const figures = [await cpuPerSecond(child.pid!)];
    await api('POST', '/projects/main/apply', { items: [{ spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '1' } }] });
    await until('the fleet instance to be idle', async () => JSON.stringify(await api('GET', '/projects/main/fleets/local')).includes('"idle"'));
    figures.push(await cpuPerSecond(child.pid!));
    const servicePort = await freePort();
    await api('POST', '/projects/main/apply', { items: [{
      spec: { type: 'service', name: 'echo', port: servicePort, env: { PORT: String(servicePort) }, files: ['server.js'], commands: ['node server.js'] },
      files: [{ path: 'server.js', contentBase64: Buffer.from(UPSTREAM).toString('base64') }],
    }] });
    await until('the replica to be ready', async () => (await api('GET', '/projects/main/runs/echo')).service?.replicas.some((r: any) => r.state === 'ready'));
    figures.push(await cpuPerSecond(child.pid!));
    await api('POST', '/projects/main/runs/echo/stop', {});
    await api('DELETE', '/projects/main/fleets/local');
    await until('the fleet to be gone', async () => (await fetch(`${url}/api/projects/main/fleets/local`, { headers: { authorization: `Bearer ${TOKEN}` } })).status === 404, 60_000);
    return figures;
  } finally {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await Promise.race([exited, sleep(20_000).then(() => child.kill('SIGKILL'))]);
    rmSync(dir, { recursive: true, force: true });
  }
}

const results = CLIS.map(() => STATES.map(() => [] as number[]));
const loads: number[] = [];
for (let r = 0; r < ROUNDS; r++) {
  for (const [i, cli] of CLIS.entries()) {
    const figures = await round(cli);
    figures.forEach((ms, s) => results[i]![s]!.push(ms));
    loads.push(loadavg()[0]!);
    console.log(`round ${r + 1}, ${cli}: ${figures.map((ms) => `${ms.toFixed(0)} ms/s`).join(', ')} (load ${loadavg()[0]!.toFixed(1)})`);
  }
}
console.log(`\nserver CPU per second, median of ${ROUNDS} rounds of ${SECONDS} s (load average ${median(loads).toFixed(1)} on ${(await import('node:os')).cpus().length} cores)`);
for (const [s, state] of STATES.entries()) {
  console.log(`  ${state.padEnd(34)} ${CLIS.map((cli, i) => `${median(results[i]![s]!).toFixed(0).padStart(4)} ms/s${CLIS.length > 1 ? ` (${i === 0 ? 'this build' : cli})` : ''}`).join('   ')}`);
}
