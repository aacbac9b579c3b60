import { expect } from 'chai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Event, Run } from '../api/objects.js';
import { startServer, type RunningServer, type ServerOptions } from '../server/server.js';
import { runCli, show } from './helpers/cli.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { useLocalCliSuite } from './helpers/local-cli-hooks.js';
import { eventually, LOCAL_CONFIG } from './helpers/server.js';

// Every-second schedules (the 6-field form, seconds first) keep these tests short.
const EVERY_SECOND = '* * * * * *';
const TOKEN = 'test-admin-token';

async function api(server: RunningServer, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${server.url}/api/projects/main${path}`, {
    method,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** The runs the scheduled task `name` submitted, oldest first. */
async function runsOf(server: RunningServer, name: string): Promise<Run[]> {
  const runs = (await api(server, 'GET', '/runs?all=true')).body as Run[];
  return runs.filter((run) => run.scheduledBy?.schedule === name).sort((a, b) => a.submittedAt.localeCompare(b.submittedAt));
}

async function eventsOf(server: RunningServer, name: string): Promise<Event[]> {
  return (await api(server, 'GET', `/events?object=${name}`)).body as Event[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('scheduled tasks through the CLI (pglite)', function () {
  this.timeout(90_000);
  const suite = useLocalCliSuite('pglite');
  const cli = (args: string[]) => runCli(args, { home: suite().home.home, cwd: suite().work });
  const write = (file: string, text: string) => writeFileSync(join(suite().work, file), text);

  it('refuses an invalid cron expression at its file, line and field, in the CLI and the API', async () => {
    write('bad-cron.yml', 'type: task\nname: bad\nschedule:\n  cron:\n    - "*/5 * * * *"\n    - "61 * * * *"\ncommands: [echo hi]\n');
    const listed = await cli(['apply', '-f', 'bad-cron.yml', '-y']);
    expect(listed.code, show(listed)).to.equal(1);
    expect(listed.stderr).to.contain('bad-cron.yml:6:7: schedule.cron[1]: invalid cron expression "61 * * * *"');
    expect(listed.stderr).to.contain('expected range 0-59');

    write('short-cron.yml', 'type: task\nname: bad\nschedule:\n  cron: "*/5 * *"\ncommands: [echo hi]\n');
    const short = await cli(['apply', '-f', 'short-cron.yml', '-y']);
    expect(short.stderr).to.contain('short-cron.yml:4:9: schedule.cron: expected a cron expression of 5 fields');
    expect(short.stderr).to.contain('has 3 fields');

    const refused = await api(suite().server, 'POST', '/runs/apply', { spec: { type: 'task', name: 'bad', commands: ['echo hi'], schedule: { cron: 'H * * * *' } } });
    expect(refused.status).to.equal(422);
    expect(refused.body.error.details[0].path).to.equal('schedule.cron');
    expect(refused.body.error.message).to.contain('the minute field "H" of "H * * * *" is not standard cron');
  });

  it('submits a run at each tick, skips ticks while that run is active, follows a re-apply, and stops when told', async () => {
    const { server } = suite();
    write('tick.yml', `type: task\nname: tick\nschedule:\n  cron: "${EVERY_SECOND}"\ncommands:\n  - echo "hello from $ORCHESTRATOR_RUN_NAME"\n  - sleep 1\n`);
    const applied = await cli(['apply', '-f', 'tick.yml', '-y']);
    expect(applied.code, show(applied)).to.equal(0);
    expect(applied.stderr).to.match(/task tick: create\n\s+schedule\s+\* \* \* \* \* \* \(UTC\): next run at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, in \d+s/);
    expect(applied.stderr).to.match(/task tick scheduled: next run at .* UTC \(\* \* \* \* \* \*, UTC\)/);
    expect(applied.stdout).to.equal('tick\n');

    const ps = await cli(['ps']);
    expect(ps.stdout).to.match(/tick\s+task\s+pending \(next run in \d+s\)/);

    const [first, second] = await eventually(async () => {
      const runs = await runsOf(server, 'tick');
      return runs.length >= 2 && runs[0]!.status === 'done' ? runs : null;
    }, 30_000, 'a second run once the first is done');
    expect(first!.name).to.equal('tick-1');
    expect(second!.name).to.equal('tick-2');
    expect(Date.parse(second!.submittedAt), 'the second run waited for the first to end').to.be.at.least(Date.parse(first!.finishedAt!));
    const events = await eventsOf(server, 'tick');
    expect(events.some((e) => e.reason === 'TickSkipped' && /tick-1 is still \w+/.test(e.message)), JSON.stringify(events)).to.equal(true);
    expect(events.filter((e) => e.reason === 'TickSubmitted').map((e) => e.message)[0]).to.match(/^tick-1 submitted for \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC/);

    const logs = await cli(['logs', 'tick-1']);
    expect(logs.stdout).to.equal('hello from tick-1\n');

    write('tick.yml', 'type: task\nname: tick\nschedule:\n  cron: "*/2 * * * * *"\ncommands:\n  - echo "hello from $ORCHESTRATOR_RUN_NAME"\n');
    const reapplied = await cli(['apply', '-f', 'tick.yml', '-y']);
    expect(reapplied.code, show(reapplied)).to.equal(0);
    expect(reapplied.stderr).to.contain('task tick: update (the scheduled task takes the new spec and schedule from its next run on');
    expect(reapplied.stderr).to.contain('task tick updated to generation 2: next run at ');
    const { schedule } = (await api(server, 'GET', '/runs/tick')).body as Run;
    expect(schedule!.cron).to.deep.equal(['*/2 * * * * *']);
    expect(Date.parse(schedule!.nextRunAt!) % 2000, 'the next run is due at an even second').to.equal(0);
    const quick = await eventually(async () => (await runsOf(server, 'tick')).find((run) => run.status === 'done' && !JSON.stringify(run.spec.commands).includes('sleep')), 20_000, 'a run of the new spec');
    expect(new Date(quick.scheduledBy!.tick).getUTCSeconds() % 2).to.equal(0);

    const stopped = await cli(['stop', 'tick']);
    expect(stopped.code, show(stopped)).to.equal(0);
    expect(stopped.stdout).to.contain('tick: terminated (stopped_by_user)');
    const submitted = (await runsOf(server, 'tick')).length;
    await sleep(2100);
    expect((await runsOf(server, 'tick')).length, 'no run after the schedule was stopped').to.equal(submitted);

    const last = await eventually(async () => {
      const runs = await runsOf(server, 'tick');
      return runs.every((run) => run.status === 'done') ? runs[runs.length - 1] : null;
    }, 20_000, 'the runs submitted before the stop to end');
    expect(((await api(server, 'GET', '/runs/tick')).body as Run).schedule).to.deep.equal({ cron: ['*/2 * * * * *'], nextRunAt: null, lastRun: last!.name });
    const latest = await cli(['logs', 'tick']);
    expect(latest.stdout).to.equal(`hello from ${last!.name}\n`);
    const followed = await cli(['logs', '-f', 'tick']);
    expect(followed.stderr).to.contain(`following ${last!.name}, the latest run of scheduled task tick`);
    expect(followed.stdout).to.equal(`hello from ${last!.name}\n`);
    const deleted = await cli(['delete', 'tick']);
    expect(deleted.code, show(deleted)).to.equal(0);
    const all = await cli(['ps', '-a']);
    expect(all.stdout).not.to.match(/^tick\s/m);
    expect(all.stdout).to.match(/^tick-1\s+task\s+done/m);
  });
});

describe('scheduled services and dev environments through the CLI (pglite)', function () {
  this.timeout(120_000);
  const suite = useLocalCliSuite('pglite');
  const cli = (args: string[]) => runCli(args, { home: suite().home.home, cwd: suite().work });
  const write = (file: string, text: string) => writeFileSync(join(suite().work, file), text);
  const running = async (schedule: string, name: string) => eventually(async () => {
    const run = (await runsOf(suite().server, schedule)).find((r) => r.name === name);
    return run?.status === 'running' ? run : null;
  }, 60_000, `${name} running`);

  it('starts a service at its ticks, each run reached under the schedule\'s name, one at a time', async () => {
    const { server } = suite();
    const reach = async () => (await fetch(`${server.url}/proxy/services/main/web/`, { headers: { authorization: `Bearer ${TOKEN}` } })).status;
    write('web.yml', `type: service\nname: web\nport: 8000\ncommands: ["python3 -m http.server $PORT"]\nschedule:\n  cron: "${EVERY_SECOND}"\n`);
    const applied = await cli(['apply', '-f', 'web.yml', '-y']);
    expect(applied.code, show(applied)).to.equal(0);
    expect(applied.stderr).to.match(/service web: create\n\s+schedule\s+\* \* \* \* \* \* \(UTC\): next run at/);
    expect(applied.stderr).to.match(/service web scheduled: next run at .* UTC \(\* \* \* \* \* \*, UTC\)/);
    expect(applied.stdout).to.equal('web\n');

    const first = await running('web', 'web-1');
    expect(first.service!.path).to.equal('/proxy/services/main/web/');
    await eventually(async () => (await reach()) === 200, 30_000, 'web-1 served at /proxy/services/main/web/');
    const ps = await cli(['ps']);
    expect(ps.stdout).to.match(/^web\s+service\s+pending \(next run in \d+s\)/m);
    expect(ps.stdout).to.match(/^web-1\s+service\s+running/m);
    await sleep(1500);
    expect((await runsOf(server, 'web')).map((r) => r.name), 'no second run while the first is active').to.deep.equal(['web-1']);

    expect((await cli(['stop', 'web-1'])).code).to.equal(0);
    await running('web', 'web-2');
    await eventually(async () => (await reach()) === 200, 30_000, 'web-2 served at the same path');

    const ended = await cli(['stop', 'web']);
    expect(ended.stdout).to.contain('web: terminated (stopped_by_user)');
    expect((await api(server, 'GET', '/runs/web-2')).body.status, 'the run it submitted carries on').to.equal('running');
    expect((await cli(['delete', 'web'])).code).to.equal(0);
    expect((await api(server, 'GET', '/runs/web-2')).body.service.path, 'a deleted schedule frees its name').to.equal('/proxy/services/main/web-2/');
    await eventually(async () => (await fetch(`${server.url}/proxy/services/main/web-2/`, { headers: { authorization: `Bearer ${TOKEN}` } })).status === 200, 20_000, 'web-2 under its own name');
    expect((await cli(['stop', 'web-2'])).code).to.equal(0);
  });

  it('starts a dev environment at its ticks, its latest run\'s logs read under the schedule\'s name', async () => {
    write('dev.yml', `type: dev-environment\nname: dev\ninit: ['echo "ready in $ORCHESTRATOR_RUN_NAME"']\nschedule:\n  cron: "${EVERY_SECOND}"\n`);
    const applied = await cli(['apply', '-f', 'dev.yml', '-y']);
    expect(applied.code, show(applied)).to.equal(0);
    expect(applied.stderr).to.match(/dev-environment dev scheduled: next run at /);
    await running('dev', 'dev-1');
    const logs = await eventually(async () => {
      const result = await cli(['logs', 'dev']);
      return result.stdout.includes('ready in dev-1') ? result : null;
    }, 20_000, 'the init output of dev-1');
    expect(logs.code, show(logs)).to.equal(0);
    const events = await eventsOf(suite().server, 'dev-1');
    expect(events[0]!.message).to.match(/^dev-environment submitted by schedule dev for /);
    expect((await cli(['stop', 'dev'])).code).to.equal(0);
    expect((await cli(['stop', 'dev-1'])).code).to.equal(0);
  });
});

/** A server on a folder and database that outlive it, so that it can be started again on them. */
async function restartableServer(kind: 'pglite' | 'postgres', databaseUrl?: string) {
  const dir = mkdtempSync(join(tmpdir(), 'orch-schedule-'));
  writeFileSync(join(dir, 'config.yml'), LOCAL_CONFIG);
  const scratch = kind === 'postgres' && !databaseUrl ? await createScratchDatabase() : null;
  const options: ServerOptions = { port: 0, dir, databaseUrl: databaseUrl ?? scratch?.url, adminToken: TOKEN, logLevel: 'error', controllerIntervalMs: 200 };
  return {
    start: () => startServer(options),
    remove: async () => {
      await scratch?.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// No offer of the local fleet has an H100, so each run fails at once (no_offers) and no run is active at the next tick.
for (const kind of DATABASE_KINDS) {
  describe(`a scheduled task across a server restart (${kind})`, function () {
    this.timeout(60_000);

    it('submits one run for the ticks missed while no server ran, at once, then keeps the schedule', async () => {
      const place = await restartableServer(kind);
      let server = await place.start();
      try {
        expect((await api(server, 'POST', '/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } })).status).to.equal(201);
        const applied = await api(server, 'POST', '/runs/apply', { spec: { type: 'task', name: 'beat', commands: ['true'], resources: { gpu: 'H100' }, schedule: { cron: EVERY_SECOND } } });
        expect(applied.status).to.equal(201);
        expect(applied.body.status).to.equal('pending');
        await eventually(async () => (await runsOf(server, 'beat')).length > 0, 10_000, 'a first run');
        await server.close();
        await sleep(2200);
        const restartedAt = Date.now();
        server = await place.start();
        const afterRestart = await eventually(async () => {
          const runs = (await runsOf(server, 'beat')).filter((run) => Date.parse(run.submittedAt) >= restartedAt);
          return runs.some((run) => Date.parse(run.scheduledBy!.tick) >= restartedAt) ? runs : null;
        }, 10_000, 'a run for a tick after the restart');
        const madeUp = afterRestart.filter((run) => Date.parse(run.scheduledBy!.tick) < restartedAt);
        expect(madeUp.map((run) => run.scheduledBy!.tick), 'runs for ticks missed while down').to.have.length(1);
        const events = await eventsOf(server, 'beat');
        expect(events.some((e) => e.reason === 'TickSubmitted' && e.message.includes('later times missed while no server ran are not made up'))).to.equal(true);
        const view = (await api(server, 'GET', '/runs/beat')).body as Run;
        expect(view.status).to.equal('pending');
        expect(Date.parse(view.schedule!.nextRunAt!)).to.be.greaterThan(restartedAt);
      } finally {
        await server.close();
        await place.remove();
      }
    });
  });
}

describe('two servers on one Postgres database with a scheduled task', function () {
  this.timeout(60_000);

  it('submit each tick once between them', async () => {
    const database = await createScratchDatabase();
    const places = [await restartableServer('postgres', database.url), await restartableServer('postgres', database.url)];
    const servers = await Promise.all(places.map((place) => place.start()));
    try {
      // As above: each run fails at once, as no offer has an H100.
      expect((await api(servers[0]!, 'POST', '/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } })).status).to.equal(201);
      const applied = await api(servers[0]!, 'POST', '/runs/apply', { spec: { type: 'task', name: 'twice', commands: ['true'], resources: { gpu: 'H100' }, schedule: { cron: EVERY_SECOND } } });
      expect(applied.status).to.equal(201);
      await eventually(async () => (await runsOf(servers[1]!, 'twice')).length >= 4, 15_000, 'four runs');
      await api(servers[1]!, 'POST', '/runs/twice/stop', {});
      await eventually(async () => (await api(servers[0]!, 'GET', '/runs/twice')).body.status === 'terminated', 10_000, 'the schedule to end');
      const runs = await runsOf(servers[0]!, 'twice');
      const ticks = runs.map((run) => run.scheduledBy!.tick);
      expect(new Set(ticks).size, `ticks: ${ticks.join(', ')}`).to.equal(ticks.length);
      expect(runs.map((run) => run.name).sort()).to.deep.equal(runs.map((_, index) => `twice-${index + 1}`).sort());
      const submittedEvents = (await eventsOf(servers[0]!, 'twice')).filter((e) => e.reason === 'TickSubmitted');
      expect(submittedEvents).to.have.length(runs.length);
    } finally {
      for (const server of servers) await server.close();
      for (const place of places) await place.remove();
      await database.drop();
    }
  });
});
