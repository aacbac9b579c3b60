/**
 * Console benchmark, in headless Chromium against a real server (embedded PGlite) on loopback:
 * 1. first load: bytes transferred (and gzip-compressed) and the time until the runs list answers a click;
 * 2. the runs page with 1 000 runs: time to render them, then 100 live changes a second for 10 s, with the long
 *    tasks (over 50 ms, as the browser reports them) and the frames over the 16 ms budget;
 * 3. the logs view following a job that prints about 10 000 lines a second for 10 s.
 *
 *   npm run bench:console                 # embedded PGlite
 *   npm run bench:console -- --postgres   # a scratch database on the local PostgreSQL
 *
 * References, measured in the same run: an API round trip from the page; the same page left alone for 10 s;
 * the lines the server stored in the same time.
 */
import { mkdtempSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'playwright-core';
import { buildConsole } from '../console/build.js';
import { startServer } from '../server/server.js';
import { CHANNELS } from '../store/channels.js';
import { launchChromium } from '../test/helpers/chromium.js';
import { signInToConsole } from '../test/helpers/console.js';
import { createScratchDatabase } from '../test/helpers/databases.js';

const RUNS = 1000;
const UPDATES_PER_SECOND = 100;
const WINDOW_MS = 10_000;
/** The changes fall at random on the newest 498 queued runs (the 500 the page listed before it listed all, less two). */
const CHANGED_AMONG = 498;
const TOKEN = 'bench-token';
/** A new run's message until the scheduler gives it its reason (store/runs.ts). */
const UNSCHEDULED = 'waiting to be scheduled';
const usePostgres = process.argv.includes('--postgres');

const ms = (value: number) => `${value.toFixed(0)} ms`;
const kb = (bytes: number) => `${(bytes / 1024).toFixed(0)} KB`;
const row = (what: string, figure: string, goal: string) => console.log(`${what.padEnd(58)} ${figure.padEnd(30)} ${goal}`);
const sleep = (millis: number) => new Promise<void>((resolve) => setTimeout(resolve, millis));

/** Long tasks and frames over budget while `during` runs, observed in the page. */
async function frameFigures(page: Page, during: () => Promise<void>): Promise<{ longTasks: number; longestMs: number; slowFrames: number; frames: number }> {
  // A string, not a function: tsx's helpers (__name) do not exist in the page.
  await page.evaluate(`(() => {
    window.bench = { long: [], frames: [] };
    new PerformanceObserver((list) => { for (const entry of list.getEntries()) window.bench.long.push(entry.duration); }).observe({ type: 'longtask' });
    let last = performance.now();
    const frame = (now) => {
      window.bench.frames.push(now - last);
      last = now;
      requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
  })()`);
  await during();
  const { long, frames } = await page.evaluate('window.bench') as { long: number[]; frames: number[] };
  return { longTasks: long.length, longestMs: Math.max(0, ...long), slowFrames: frames.filter((frame) => frame > 17).length, frames: frames.length };
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'orch-bench-console-'));
  const consoleDir = join(dir, 'console');
  await buildConsole(consoleDir);
  writeFileSync(join(dir, 'config.yml'), 'projects:\n- name: main\n  backends:\n  - type: local\n    runtime: process\n');
  const scratch = usePostgres ? await createScratchDatabase() : null;
  const server = await startServer({ port: 0, dir, databaseUrl: scratch?.url, adminToken: TOKEN, logLevel: 'error', consoleDir });
  const api = async (method: string, path: string, body?: unknown) => (await fetch(`${server.url}/api/projects/main${path}`, {
    method, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body ? JSON.stringify(body) : undefined,
  })).json() as Promise<any>;
  const browser = await launchChromium();
  try {
    const session = await signInToConsole(server.url, TOKEN);
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    await context.addCookies([{ name: 'orchestrator_session', value: session.cookie.split('=')[1]!, url: server.url }]);
    const page = await context.newPage();
    console.log(`## the console in Chromium, server on ${server.db.driver}`);
    console.log(`${'figure'.padEnd(58)} ${'measured'.padEnd(30)} goal / reference`);

    // 1. First load: with the browser's cache off, then again with what it kept.
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable');
    let transferred = 0;
    cdp.on('Network.loadingFinished', (event) => { transferred += event.encodedDataLength; });
    const load = async () => {
      transferred = 0;
      const started = Date.now();
      await page.goto(`${server.url}/projects/main/runs`);
      await page.getByText('No runs in this project yet.').waitFor();
      await page.getByLabel('Status').selectOption('running');
      const loaded = await page.evaluate('performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd') as number;
      return { ms: Date.now() - started, bytes: transferred, loadedMs: loaded };
    };
    await cdp.send('Network.setCacheDisabled', { cacheDisabled: true });
    const cold = await load();
    await cdp.send('Network.setCacheDisabled', { cacheDisabled: false });
    await load();
    const warm = await load();
    const assets = join(consoleDir, 'assets');
    const uncompressed = readdirSync(assets).filter((name) => /\.(js|css)$/.test(name)).reduce((sum, name) => sum + statSync(join(assets, name)).size, 0);
    const roundTrip = await page.evaluate(async () => { const at = performance.now(); await fetch('/api/projects/main/runs'); return performance.now() - at; });
    row('first load: bytes transferred (gzip), empty cache', kb(cold.bytes), `goal < 300 KB; reference: every file uncompressed ${kb(uncompressed)}`);
    row('first load: to the runs list answering a filter', ms(cold.ms), `goal < 1 s; reference: one API round trip ${ms(roundTrip)}`);
    row('  of which the page and its script loaded (DOMContentLoaded)', ms(cold.loadedMs), '');
    row('a later load, files from the cache', `${ms(warm.ms)}, ${kb(warm.bytes)}`, 'goal < 1 s');
    await cdp.detach();

    // 2. 1 000 runs: one task holds the fleet's one instance, the others wait in the queue; copies are written straight
    // to the database, as 1 000 applies would leave them (waiting to be scheduled). The page is timed at steady state,
    // once the scheduler has passed over them all (each has its queue reason): that first pass reads and writes every
    // new run, once, and while it runs the server's one thread (PGlite's too) serves nothing else.
    // No page is open meanwhile: its live stream would read the views of all those runs again when their reasons are
    // written, and still be at it when the page is timed.
    await page.goto('about:blank');
    await api('POST', '/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } });
    await api('POST', '/runs/apply', { spec: { type: 'task', name: 'holder', commands: ['sleep 600'] } });
    await api('POST', '/runs/apply', { spec: { type: 'task', name: 'queued', commands: ['true'] } });
    await server.db.query(
      `INSERT INTO runs SELECT (jsonb_populate_record(null::runs, to_jsonb(r) || jsonb_build_object(
         'id', r.id || '-' || g, 'name', 'queued-' || g, 'submitted_at', r.submitted_at + g * interval '1 millisecond',
         'status_message', $2::text))).*
       FROM runs r, generate_series(1, $1) g WHERE r.name = 'queued'`, [RUNS - 2, UNSCHEDULED]);
    const passStarted = Date.now();
    const unscheduled = async () => Number((await server.db.query(`SELECT count(*)::int AS n FROM runs WHERE name LIKE 'queued-%' AND status_message = $1`, [UNSCHEDULED]))[0].n);
    while (await unscheduled() > 0) await sleep(100);
    const passMs = Date.now() - passStarted;
    const renderStarted = Date.now();
    await page.goto(`${server.url}/projects/main/runs`);
    await page.locator(`tr[data-run="queued-${RUNS - 2}"]`).waitFor();
    const renderMs = Date.now() - renderStarted;
    const listed = Number(await page.locator('table.runs').getAttribute('data-count'));
    const drawnRows = await page.locator('tr[data-run]').count();
    const listStarted = Date.now();
    await api('GET', '/runs');
    const listMs = Date.now() - listStarted;
    row(`runs page: a project of ${RUNS} runs, rendered after`, ms(renderMs), `goal < 1 s; the list holds ${listed}, ${drawnRows} rows drawn`);
    row('  reference: the API reading that project\'s runs list', ms(listMs), '');
    row('  reference: the scheduler\'s first pass over the new runs (before)', ms(passMs), 'not timed in the page');
    const scrollStarted = Date.now();
    await page.evaluate('window.scrollTo(0, document.documentElement.scrollHeight)');
    await page.locator('tr[data-run="queued-1"]').waitFor();
    row('runs page: scrolled to the oldest run, drawn after', ms(Date.now() - scrollStarted), '');
    await page.evaluate('window.scrollTo(0, 0)');
    const idle = await frameFigures(page, () => sleep(WINDOW_MS));
    let changes = 0;
    const busy = await frameFigures(page, async () => {
      const started = Date.now();
      for (let tick = 1; Date.now() < started + WINDOW_MS; tick++) {
        const batch = UPDATES_PER_SECOND / 10;
        await server.db.query(
          `UPDATE runs SET status_message = 'waiting: change ' || $1::int, updated_at = now()
           WHERE id IN (SELECT id FROM (SELECT id FROM runs WHERE name LIKE 'queued-%' ORDER BY submitted_at DESC LIMIT $3) shown ORDER BY random() LIMIT $2)`,
          [changes, batch, CHANGED_AMONG]);
        await server.db.notify(CHANNELS.runs);
        changes += batch;
        // Paced by the clock, so that slow writes are caught up on rather than slowing the rate.
        await sleep(Math.max(0, started + tick * 100 - Date.now()));
      }
    });
    row(`runs page: ${UPDATES_PER_SECOND} changes/s for ${WINDOW_MS / 1000} s (${changes} changes)`, `${busy.longTasks} long tasks, longest ${ms(busy.longestMs)}`, `reference: left alone ${idle.longTasks} long tasks`);
    row('runs page: frames over 16 ms in those 10 s', `${busy.slowFrames} of ${busy.frames}`, `goal 0; reference: left alone ${idle.slowFrames} of ${idle.frames}`);
    await api('POST', '/runs/holder/stop', { abort: true });
    await server.db.query(`DELETE FROM runs WHERE name LIKE 'queued%'`);

    // 3. The logs view following about 10 000 lines a second.
    const program = 'i=0; while true; do seq $i $((i+999)) | sed "s/^/step /"; i=$((i+1000)); sleep 0.1; done';
    await api('POST', '/runs/apply', { spec: { type: 'task', name: 'chatty', commands: [program] } });
    while ((await api('GET', '/runs/chatty')).status !== 'running') await sleep(200);
    await page.goto(`${server.url}/projects/main/runs/chatty`);
    await page.locator('.logs .line').first().waitFor();
    const shown = async () => Number(((await page.locator('.log-count').textContent()) ?? '').replace(/,/g, '').match(/\d+/)?.[0] ?? 0);
    const storedBefore = (await api('GET', '/runs/chatty/logs')).last as number;
    const shownBefore = await shown();
    const following = await frameFigures(page, () => sleep(WINDOW_MS));
    const shownAfter = await shown();
    const storedAfter = (await api('GET', '/runs/chatty/logs')).last as number;
    const rowsInDom = await page.locator('.logs .line').count();
    row('logs view: lines shown per second while following', `${Math.round((shownAfter - shownBefore) / (WINDOW_MS / 1000)).toLocaleString('en-US')} lines/s`,
      `reference: the server stored ${Math.round((storedAfter - storedBefore) / (WINDOW_MS / 1000)).toLocaleString('en-US')} lines/s`);
    row('logs view: long tasks while following', `${following.longTasks}, longest ${ms(following.longestMs)}`, 'goal 0');
    row('logs view: frames over 16 ms while following', `${following.slowFrames} of ${following.frames}`, 'goal 0');
    row('logs view: rows in the DOM', String(rowsInDom), `of ${shownAfter.toLocaleString('en-US')} lines held`);
    await api('POST', '/runs/chatty/stop', { abort: true });
  } finally {
    await browser.close();
    await server.close();
    await scratch?.drop();
  }
}

await main();
