import { expect } from 'chai';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';

/** One instance split into 9 blocks (of no whole GPU each, as runs without GPUs ask), so that eight runs share it and its agent. */
const FLEET = { spec: { type: 'fleet', name: 'shared', backends: ['gpucloud'], nodes: '1..1', idle_duration: 'off', blocks: 9, resources: { gpu: 'L4:8' } } };
/** Four instances of two blocks of four GPUs each: eight runs of four GPUs on four agents. */
const PAIRS = { spec: { type: 'fleet', name: 'pairs', backends: ['gpucloud'], nodes: '4..4', idle_duration: 'off', blocks: 2, resources: { gpu: 'L4:8' } } };
const LINES = 8;
const ticker = (name: string, { fleet, gpu } = { fleet: 'shared', gpu: 0 as number | string }) => ({
  spec: { type: 'task', name, fleets: [fleet], resources: { gpu }, commands: [`for i in $(seq 1 ${LINES}); do echo "$ORCHESTRATOR_RUN_NAME $i"; sleep 1; done`] },
});

for (const kind of DATABASE_KINDS) {
  describe(`run watch: the jobs of an instance looked at together (${kind})`, function () {
    this.timeout(120_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    const run = async (name: string) => (await server.api('GET', `/api/projects/main/runs/${name}`)).body;
    const lines = async (name: string): Promise<string[]> =>
      (await server.api('GET', `/api/projects/main/runs/${name}/logs`)).body.lines.map((line: { text: string }) => line.text);
    const ended = (names: string[]) => eventually(async () => {
      const runs = await Promise.all(names.map(run));
      return runs.every((current) => ['done', 'failed', 'terminated'].includes(current.status)) ? runs : null;
    }, 60_000, 'every run to end');

    before(async () => {
      emulator = await startEmulator({ port: 0, bootDelayMs: 100, agents: 'simulated', capacity: { L4: 5 } });
      server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey));
      expect((await server.api('POST', '/api/projects/main/fleets/apply', FLEET)).status).to.equal(201);
      await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.some((i: { status: string }) => i.status === 'idle'), 30_000, 'the instance');
    });
    after(async () => {
      await server?.stop();
      await emulator?.close();
    });

    it('asks the agent about all of an instance\'s running jobs in one call, and stores every line of each once, in order', async () => {
      const names = Array.from({ length: 8 }, (_, i) => `tick-${i}`);
      expect((await server.api('POST', '/api/projects/main/apply', { items: names.map((name) => ticker(name)) })).status).to.be.below(300);
      const agents = emulator.simulatedAgents!;
      await eventually(async () => agents.jobs().filter((job) => job.status.state === 'running').length === names.length, 30_000, 'every job running');
      const requestsBefore = agents.requests;
      const started = Date.now();
      await new Promise((resolve) => setTimeout(resolve, 3000));
      const perSecond = (agents.requests - requestsBefore) / ((Date.now() - started) / 1000);
      expect(perSecond, 'agent calls a second while 8 jobs print a line a second each').to.be.below(names.length);

      const runs = await ended(names);
      for (const current of runs) expect(current).to.include({ status: 'done', exitCode: 0 });
      for (const name of names) {
        expect(await lines(name)).to.deep.equal(Array.from({ length: LINES }, (_, i) => `${name} ${i + 1}`));
      }
    });

    it('stores a running job\'s lines every few seconds rather than at every look, and every one of them by its end', async () => {
      expect((await server.api('POST', '/api/projects/main/apply', { items: [ticker('sparse')] })).status).to.be.below(300);
      for (const current of await ended(['sparse'])) expect(current).to.include({ status: 'done', exitCode: 0 });
      const [stored] = await server.db.query<{ chunks: number }>(
        `SELECT count(*)::int AS chunks FROM log_chunks c JOIN runs r ON r.id = c.run_id WHERE r.name = 'sparse'`);
      // A line a second for 8 s: a chunk at every look that found one stored 8 or more.
      expect(stored!.chunks).to.be.at.most(4);
      expect(await lines('sparse')).to.deep.equal(Array.from({ length: LINES }, (_, i) => `sparse ${i + 1}`));
    });

    it('keeps a running run leased to the watch between its looks, its row not written again at each one, and gives it back once it ended', async () => {
      expect((await server.api('POST', '/api/projects/main/apply', { items: [ticker('held')] })).status).to.be.below(300);
      const job = async () => emulator.simulatedAgents!.jobs().find((found) => found.submission.runName === 'held');
      await eventually(async () => (await job())?.status.state === 'running', 30_000, 'the job running');
      const versions = new Set<string>();
      const owners = new Set<string | null>();
      const lookedAt = new Set<number | null>();
      for (const started = Date.now(); Date.now() - started < 7000;) {
        const [row] = await server.db.query<{ version: string; lease_owner: string | null }>(`SELECT xmin::text AS version, lease_owner FROM runs WHERE name = 'held'`);
        versions.add(row!.version);
        owners.add(row!.lease_owner);
        lookedAt.add((await job())!.lastAskedAt);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(lookedAt.size, 'looks at the job in 7 s').to.be.at.least(2);
      expect([...owners], 'the lease all along').to.have.length(1).and.not.include(null);
      // A claim and a release at each look would make two new versions of the row a look; a renewal of the 15 s lease is one in 7.5 s.
      expect(versions.size, 'versions of the row in 7 s').to.be.at.most(2);
      for (const current of await ended(['held'])) expect(current).to.include({ status: 'done', exitCode: 0 });
      await eventually(async () => (await server.db.query(`SELECT lease_owner FROM runs WHERE name = 'held'`))[0]!.lease_owner === null, 5000, 'the lease given back');
    });

    it('reads a held run again without its spec, and whole once its generation moves: a max_duration written with a new generation stops its job', async () => {
      const long = { spec: { ...ticker('respec').spec, commands: ['for i in $(seq 1 120); do echo "tick $i"; sleep 1; done'] } };
      expect((await server.api('POST', '/api/projects/main/apply', { items: [long] })).status).to.be.below(300);
      await eventually(async () => (await run('respec')).status === 'running', 30_000, 'the job running');
      const heldReads: string[] = [];
      // The watch's statements go through the controllers' handle.
      const work = server.db.background;
      const query = work.query.bind(work);
      work.query = (sql, params) => {
        if (sql.includes('WITH renewed AS')) heldReads.push(sql);
        return query(sql, params);
      };
      try {
        await eventually(async () => heldReads.length >= 1, 20_000, 'the held run read again');
        expect(heldReads.filter((sql) => /\bspec\s*,/.test(sql)), 'held reads selecting the spec').to.deep.equal([]);
        await server.db.query(`UPDATE runs SET spec = jsonb_set(spec, '{max_duration}', '"2s"'), generation = generation + 1 WHERE name = 'respec'`);
        const [current] = await ended(['respec']);
        expect(current).to.include({ status: 'terminated', terminationReason: 'max_duration_exceeded' });
      } finally {
        work.query = query;
        await server.api('POST', '/api/projects/main/runs/respec/stop', { abort: true });
      }
    });

    it('reads the instances a pass looks at, and the last stored line of all their runs, in one statement each, and stores every line of each once, in order', async () => {
      expect((await server.api('POST', '/api/projects/main/fleets/apply', PAIRS)).status).to.equal(201);
      await eventually(async () => (await server.api('GET', '/api/projects/main/instances')).body.filter((i: { status: string }) => i.status === 'idle').length === 5, 30_000, 'the fleet\'s instances');
      const names = Array.from({ length: 8 }, (_, i) => `pair-${i}`);
      expect((await server.api('POST', '/api/projects/main/apply', { items: names.map((name) => ticker(name, { fleet: 'pairs', gpu: 'L4:4' })) })).status).to.be.below(300);
      const agents = emulator.simulatedAgents!;
      await eventually(async () => agents.jobs().filter((job) => job.status.state === 'running' && job.submission.runName.startsWith('pair-')).length === names.length, 30_000, 'every job running');
      // A restart gives every lease back: all four instances' runs fall due at once, and then stay due together.
      const lineReads: number[] = [];
      const instanceReads: number[] = [];
      let watching = true;
      await server.restart({
        onDatabaseOpen: (db) => {
          // The watch's statements go through the controllers' handle.
          const work = db.background;
          const query = work.query.bind(work);
          work.query = (sql, params) => {
            if (watching && sql.includes('FROM log_totals WHERE run_id = ANY')) lineReads.push((params![0] as string[]).length);
            if (watching && sql.includes('FROM instances WHERE id = ANY')) instanceReads.push((params![0] as string[]).length);
            return query(sql, params);
          };
        },
      });
      // The restarted server has stored no lines yet, so it reads the last stored line of every run once.
      await eventually(async () => lineReads.reduce((sum, size) => sum + size, 0) >= names.length, 30_000, 'the last stored line of every run read');
      watching = false;
      // Two runs an instance: a read per instance would read two at most.
      expect(Math.max(...lineReads), `runs in each read of their last stored lines: ${lineReads.join(', ')}`).to.be.greaterThan(2);
      expect(Math.max(...instanceReads), `instances in each read of them: ${instanceReads.join(', ')}`).to.be.greaterThan(1);
      for (const current of await ended(names)) expect(current).to.include({ status: 'done', exitCode: 0 });
      for (const name of names) {
        expect(await lines(name)).to.deep.equal(Array.from({ length: LINES }, (_, i) => `${name} ${i + 1}`));
      }
    });

    /** The seconds between the watch's looks at the job of run `name` while it runs, and how long after its end the run ended. */
    const looksAt = async (name: string, commands: string[]) => {
      const agents = emulator.simulatedAgents!;
      const intervals: number[] = [];
      const asked = agents.onJobAsked;
      agents.onJobAsked = (job, sinceLastMs) => {
        if (job.submission.runName === name && sinceLastMs !== null && job.status.state === 'running') intervals.push(sinceLastMs);
      };
      try {
        expect((await server.api('POST', '/api/projects/main/apply', { items: [{ spec: { type: 'task', name, fleets: ['shared'], commands } }] })).status).to.be.below(300);
        const job = await eventually(async () => agents.jobs().find((found) => found.submission.runName === name && found.status.state === 'running'), 30_000, 'the job running');
        const [finished] = await ended([name]);
        expect(finished).to.include({ status: 'done', exitCode: 0 });
        return { intervals, endSeenAfterMs: Date.parse(finished.finishedAt) - Date.parse(job.status.finishedAt!) };
      } finally {
        agents.onJobAsked = asked;
      }
    };

    it('stores each line once while `logs` requests store the lines the database lacks between its looks, and still looks only every few seconds', async () => {
      const agents = emulator.simulatedAgents!;
      const asked: number[] = [];
      const onJobAsked = agents.onJobAsked;
      agents.onJobAsked = (job, sinceLastMs) => {
        if (job.submission.runName === 'pulled' && sinceLastMs !== null && job.status.state === 'running') asked.push(sinceLastMs);
      };
      try {
        const count = 12;
        const commands = [`for i in $(seq 1 ${count}); do echo "pulled $i"; sleep 1; done`];
        expect((await server.api('POST', '/api/projects/main/apply', { items: [{ spec: { type: 'task', name: 'pulled', fleets: ['shared'], commands } }] })).status).to.be.below(300);
        await eventually(async () => agents.jobs().some((job) => job.submission.runName === 'pulled' && job.status.state === 'running'), 30_000, 'the job running');
        // Each read of a running job's logs stores what the database lacks, so the watch's next page starts after a line already stored.
        while ((await run('pulled')).status === 'running') {
          await lines('pulled');
          await new Promise((resolve) => setTimeout(resolve, 300));
        }
        const [finished] = await ended(['pulled']);
        expect(finished).to.include({ status: 'done', exitCode: 0 });
        expect(await lines('pulled')).to.deep.equal(Array.from({ length: count }, (_, i) => `pulled ${i + 1}`));
        // A page refused for lines stored meanwhile costs one look more; a watch that kept asking after the wrong line would look again and again.
        expect(asked.length, `looks while it ran, ${asked.join(', ')} ms apart`).to.be.within(1, 10);
      } finally {
        agents.onJobAsked = onJobAsked;
      }
    });

    it('looks at a running job every few seconds while its agent tells of its changes, and sees its end at once', async () => {
      const { intervals, endSeenAfterMs } = await looksAt('followed', ['sleep 12', 'echo done']);
      // A look a second would be twelve.
      expect(intervals.length, `looks while it ran, ${intervals.join(', ')} ms apart`).to.be.within(1, 6);
      expect(Math.max(...intervals)).to.be.at.least(4000);
      expect(endSeenAfterMs, 'the run ended after its job did').to.be.within(0, 2500);
    });

    it('looks every second at the jobs of an agent that tells of no changes', async () => {
      emulator.simulatedAgents!.withoutChanges = true;
      try {
        const { intervals, endSeenAfterMs } = await looksAt('unfollowed', ['sleep 6', 'echo done']);
        expect(intervals.length, `looks while it ran, ${intervals.join(', ')} ms apart`).to.be.at.least(4);
        expect(Math.max(...intervals)).to.be.below(2500);
        expect(endSeenAfterMs, 'the run ended after its job did').to.be.within(0, 2500);
      } finally {
        emulator.simulatedAgents!.withoutChanges = false;
      }
    });

    it('follows the jobs of an agent older than that call one by one, as before', async () => {
      const agents = emulator.simulatedAgents!;
      agents.olderAgents = true;
      try {
        const names = ['old-0', 'old-1'];
        expect((await server.api('POST', '/api/projects/main/apply', { items: names.map((name) => ticker(name)) })).status).to.be.below(300);
        await eventually(async () => (await lines('old-0')).length >= 2, 30_000, 'lines while the job runs');
        for (const current of await ended(names)) expect(current).to.include({ status: 'done', exitCode: 0 });
        for (const name of names) {
          expect(await lines(name)).to.deep.equal(Array.from({ length: LINES }, (_, i) => `${name} ${i + 1}`));
        }
      } finally {
        agents.olderAgents = false;
      }
    });
  });
}
