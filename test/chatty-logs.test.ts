import { expect } from 'chai';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { addProject, makeHome, runCli } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, gpucloudConfig, LOCAL_CONFIG, runReaches, startTestServer, type TestServer } from './helpers/server.js';

/** A job that prints as fast as it can, for ever. */
const CHATTY = ['yes "a line printed as fast as the job can, again and again"'];
const FINISHED = ['done', 'failed', 'terminated'];
/** A job that prints numbered lines as fast as it can, and one line more when a stop's signal reaches it (after the
 * line the signal may have cut short). */
const STOPPABLE = ['trap "echo; echo stopped by the signal; exit 143" TERM', 'seq 1 inf'];

const task = (name: string, commands: string[], extra: Record<string, unknown> = {}) => ({ spec: { type: 'task', name, commands, ...extra } });

async function printing(server: TestServer, name: string): Promise<void> {
  await runReaches(server, name, ['running']);
  await eventually(async () => (await server.api('GET', `/api/projects/main/runs/${name}/logs`)).body.last > 50_000, 30_000, `${name} to have printed 50 000 lines`);
}

/** Milliseconds from `since` until the run leaves `running`, and the run once it has finished. */
async function stopTakesEffect(server: TestServer, name: string, since: number): Promise<{ reactedMs: number; run: any }> {
  await runReaches(server, name, ['terminating', ...FINISHED], 10_000);
  const reactedMs = Date.now() - since;
  return { reactedMs, run: await runReaches(server, name, FINISHED, 30_000) };
}

for (const kind of DATABASE_KINDS) {
  describe(`a job that prints without pause, on ${kind}`, function () {
    this.timeout(120_000);

    describe('on the local backend', () => {
      let server: TestServer;
      before(async () => {
        server = await startTestServer(kind, `${LOCAL_CONFIG}logs:\n  max_size_per_run: 2MB\n`);
        await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } });
      });
      after(async () => {
        await server.api('DELETE', '/api/projects/main/fleets/local');
        await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.length === 0, 20_000, 'local instance to go');
        await server.stop();
      });

      it('is stopped within a second of orchestrator stop, keeping its last lines', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('chatty-stop', STOPPABLE));
        await printing(server, 'chatty-stop');
        const stoppedAt = Date.now();
        expect((await server.api('POST', '/api/projects/main/runs/chatty-stop/stop', {})).status).to.equal(202);
        const run = await runReaches(server, 'chatty-stop', FINISHED);
        expect(run).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
        const { last } = (await server.api('GET', '/api/projects/main/runs/chatty-stop/logs')).body;
        const tail: { text: string; ts: string; stream: string }[] = (await server.api('GET', `/api/projects/main/runs/chatty-stop/logs?after=${last - 5}`)).body.lines;
        // The line the job printed as the signal reached it is its last one kept: nothing it printed up to its end was lost.
        const printedLast = tail.filter((line) => line.stream === 'stdout').at(-1)!;
        expect(printedLast.text).to.equal('stopped by the signal');
        // The job itself stopped within the second, not only its status.
        expect(Date.parse(printedLast.ts) - stoppedAt).to.be.within(0, 1000);
      });

      it('is aborted at once, and ended by max_duration', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('chatty-abort', CHATTY));
        await printing(server, 'chatty-abort');
        const abortedAt = Date.now();
        await server.api('POST', '/api/projects/main/runs/chatty-abort/stop', { abort: true });
        const aborted = await stopTakesEffect(server, 'chatty-abort', abortedAt);
        expect(aborted.reactedMs).to.be.below(3000);
        expect(aborted.run).to.include({ status: 'terminated', terminationReason: 'aborted_by_user' });

        await server.api('POST', '/api/projects/main/runs/apply', task('chatty-limit', CHATTY, { max_duration: '3s' }));
        const started = Date.parse((await runReaches(server, 'chatty-limit', ['running'])).startedAt);
        const limited = await stopTakesEffect(server, 'chatty-limit', started + 3000);
        expect(limited.reactedMs).to.be.below(3000);
        expect(limited.run).to.include({ status: 'terminated', terminationReason: 'max_duration_exceeded' });
      });

      it('stores every line while followers read along', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('followed', ['for i in $(seq 1 20); do seq $((i * 1000 - 999)) $((i * 1000)); sleep 0.05; done']));
        await runReaches(server, 'followed', ['running']);
        const follow = async () => {
          const response = await fetch(`${server.url}/api/projects/main/runs/followed/logs?follow=true`, { headers: { authorization: `Bearer ${server.adminToken}` } });
          return (await response.text()).split('\n').filter((l) => l.includes('"type":"log"')).length;
        };
        const followed = await Promise.all([follow(), follow(), follow()]);
        expect(followed).to.deep.equal([20_000, 20_000, 20_000]);
        const page = (await server.api('GET', '/api/projects/main/runs/followed/logs')).body;
        expect(page).to.include({ last: 20_000, dropped: 0 });
        const [totals] = await server.db.query(`SELECT t.dropped_lines FROM log_totals t JOIN runs r ON r.id = t.run_id WHERE r.name = 'followed'`);
        expect(totals.dropped_lines).to.equal(0);
      });

      it('sends a follower the stored lines of a job gone quiet at once, page after page, not each after a wait for its next line', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('quiet', ['seq 1 12000', 'sleep 600']));
        await runReaches(server, 'quiet', ['running']);
        await eventually(async () => (await server.api('GET', '/api/projects/main/runs/quiet/logs')).body.last === 12_000, 30_000, 'every line stored');
        const opened = Date.now();
        const response = await fetch(`${server.url}/api/projects/main/runs/quiet/logs?follow=true`, { headers: { authorization: `Bearer ${server.adminToken}` } });
        const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
        let received = 0;
        let rest = '';
        while (received < 12_000) {
          const parts = (rest + (await reader.read()).value!).split('\n');
          rest = parts.pop()!;
          received += parts.filter((part) => part.includes('"type":"log"')).length;
        }
        // Three pages of 5 000 lines; the agent waits 5 s for a next line that does not come.
        expect(Date.now() - opened, 'the last stored line before any wait at the agent ran out').to.be.below(5000);
        await reader.cancel();
        await server.api('POST', '/api/projects/main/runs/quiet/stop', { abort: true });
        await runReaches(server, 'quiet', FINISHED);
      });

      it('keeps at most logs.max_size_per_run, drops the oldest lines and says so in logs and events', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('capped', ['seq 1 200000']));
        await runReaches(server, 'capped', FINISHED);
        const page = (await server.api('GET', '/api/projects/main/runs/capped/logs')).body;
        expect(page.last).to.equal(200_000);
        expect(page.dropped).to.be.greaterThan(100_000);
        expect(page.lines[0].seq).to.equal(page.dropped + 1);
        expect(page.lines[0].text).to.equal(String(page.dropped + 1));
        const events = (await server.api('GET', '/api/projects/main/events?object=capped')).body;
        const truncated = events.filter((e: { reason: string }) => e.reason === 'LogsTruncated');
        expect(truncated).to.have.length(1);
        expect(truncated[0].message).to.match(/oldest log lines were dropped: a run keeps at most 2 MB of logs \(logs\.max_size_per_run/);
        const [stored] = await server.db.query(`SELECT sum(bytes)::int AS bytes FROM log_chunks c JOIN runs r ON r.id = c.run_id WHERE r.name = 'capped'`);
        expect(stored.bytes).to.be.at.most(2 * 1024 * 1024);

        const home = makeHome();
        try {
          await addProject(home.home, server.url);
          const printed = await runCli(['logs', 'capped'], { home: home.home, timeoutMs: 60_000 });
          expect(printed.code).to.equal(0);
          expect(printed.stderr).to.include(`(${page.dropped} lines were dropped here: the server keeps a limited amount of each run's logs)`);
          const lines = printed.stdout.trimEnd().split('\n');
          expect(lines[0]).to.equal(String(page.dropped + 1));
          expect(lines[lines.length - 1]).to.equal('200000');
          expect(lines).to.have.length(200_000 - page.dropped);
          const followed = await runCli(['logs', '-f', 'capped'], { home: home.home, timeoutMs: 60_000 });
          expect(followed.stderr).to.include(`(${page.dropped} lines were dropped here`);
          expect(followed.stdout).to.equal(printed.stdout);
        } finally {
          home.remove();
        }
      });

      it('orchestrator logs without -f prints what exists and exits while the job keeps printing', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('chatty-logs', CHATTY));
        await printing(server, 'chatty-logs');
        const home = makeHome();
        try {
          await addProject(home.home, server.url);
          const printed = await runCli(['logs', 'chatty-logs'], { home: home.home, timeoutMs: 60_000 });
          expect(printed.code).to.equal(0);
          expect(printed.stdout.split('\n').length).to.be.greaterThan(1000);
          expect((await server.api('GET', '/api/projects/main/runs/chatty-logs')).body.status).to.equal('running');
        } finally {
          home.remove();
          await server.api('POST', '/api/projects/main/runs/chatty-logs/stop', { abort: true });
          await runReaches(server, 'chatty-logs', FINISHED);
        }
      });
    });

    describe('beside other runs', () => {
      let emulator: RunningEmulator;
      let server: TestServer;
      before(async () => {
        emulator = await startEmulator({ port: 0, bootDelayMs: 100, apiKey: 'chatty-key-123456' });
        server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey));
        await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'cloud', backends: ['gpucloud'], nodes: '2..2', idle_duration: 'off', resources: { gpu: 'L4:1' } } });
        await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.filter((i: { status: string }) => i.status === 'idle').length === 2, 60_000, 'two idle instances');
      });
      after(async () => {
        await server.api('DELETE', '/api/projects/main/fleets/cloud');
        await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.length === 0, 30_000, 'instances to go');
        await server.stop();
        await emulator.close();
      });

      it('never holds up a short task on another instance', async () => {
        await server.api('POST', '/api/projects/main/runs/apply', task('chatty-neighbour', CHATTY));
        await printing(server, 'chatty-neighbour');
        await server.api('POST', '/api/projects/main/runs/apply', task('short', ['sleep 1', 'echo finished']));
        const run = await runReaches(server, 'short', FINISHED, 30_000);
        expect(run.status).to.equal('done');
        expect(Date.parse(run.finishedAt) - Date.parse(run.startedAt)).to.be.below(5000);
        expect((await server.api('GET', '/api/projects/main/runs/short/logs')).body.lines.map((l: { text: string }) => l.text)).to.deep.equal(['finished']);
        await server.api('POST', '/api/projects/main/runs/chatty-neighbour/stop', { abort: true });
        await runReaches(server, 'chatty-neighbour', FINISHED);
      });
    });
  });
}
