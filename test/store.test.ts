import { expect } from 'chai';
import type { Db, Queryable, Row } from '../store/db.js';
import { claimDue, nextDueInMs, readHeldLeases, releaseLease, releaseLeases } from '../store/leases.js';
import { appendLogChunks, appendLogs, instanceAndLastLogSeq, lastLogSeqs, logLinesAfter, logTotals, readLogPage, readLogs } from '../store/logs.js';
import { claimWatchedRuns } from '../store/run-watch.js';
import { migrate, MIGRATIONS } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { applyFleet } from '../store/fleets.js';
import { giveInstanceTo, markInstanceReady } from '../store/instances.js';
import { upsertProject, upsertUser, userByToken } from '../store/projects.js';
import { insertRun, toRun, WATCHED_RUN_COLUMNS } from '../store/runs.js';
import { listRunViews } from '../store/run-views.js';
import { insertReplica, replicasOfServices } from '../store/services.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';

/** A page of lines `first`..`last` of run `runId` (`<runId> <seq>` each), to be stored after line `after`. */
const chunk = (runId: string, after: number, first: number, last: number) => ({
  runId, after, first, last,
  jsonLines: Array.from({ length: last - first + 1 }, (_, i) => JSON.stringify({ seq: first + i, ts: new Date().toISOString(), stream: 'stdout', text: `${runId} ${first + i}` })).join('\n'),
});

const REQUIREMENT = { gpu: { models: null, memoryMib: { min: null, max: null }, count: { min: 0, max: null } }, cpus: { min: null, max: null }, memoryMib: { min: null, max: null }, diskMib: { min: null, max: null }, shmSizeMib: null };

for (const kind of DATABASE_KINDS) {
  describe(`store on ${kind}`, function () {
    let db: Db;
    let second: Db;
    let drop: (() => Promise<void>) | undefined;

    before(async () => {
      if (kind === 'postgres') {
        const scratch = await createScratchDatabase();
        drop = scratch.drop;
        db = openPostgres(scratch.url);
        second = openPostgres(scratch.url);
      } else {
        db = await openPglite();
        second = db;
      }
    });
    after(async () => {
      if (second !== db) await second.close();
      await db.close();
      await drop?.();
    });

    it('applies every migration once, even when two servers migrate at the same moment', async () => {
      const [a, b] = await Promise.all([migrate(db), migrate(second)]);
      expect([...a, ...b].sort((x, y) => x - y)).to.deep.equal(MIGRATIONS.map((m) => m.version));
      expect(await migrate(db)).to.deep.equal([]);
      const rows = await db.query('SELECT version FROM schema_migrations ORDER BY version');
      expect(rows.map((r) => r.version)).to.deep.equal(MIGRATIONS.map((m) => m.version));
    });

    it('stores tokens only as hashes and finds users by token', async () => {
      const user = await upsertUser(db, 'alice', 'secret-token-1', 'user');
      const [row] = await db.query('SELECT token_hash FROM users WHERE id = $1', [user.id]);
      expect(row.token_hash).to.not.include('secret-token-1');
      expect((await userByToken(db, 'secret-token-1'))?.name).to.equal('alice');
      expect(await userByToken(db, 'secret-token-2')).to.equal(null);
    });

    it('never hands one due row to two claimers, and only the holder can release it', async () => {
      const project = await upsertProject(db, 'leases', [{ type: 'local' }]);
      for (let i = 0; i < 40; i++) {
        await applyFleet(db, project.id, { name: `f${i}`, spec: { i }, requirement: REQUIREMENT, nodesMin: 0, nodesMax: 1, idleSeconds: 60, backends: ['local'] });
      }
      const where = `project_id = '${project.id}'`;
      const claim = (on: typeof db, owner: string, limit: number) => claimDue(on, 'fleets', owner, 60_000, limit, where);
      const [a, b] = await Promise.all([claim(db, 'server-a', 25), claim(second, 'server-b', 25)]);
      const ids = [...a, ...b].map((r) => r.id);
      expect(ids.length).to.equal(40);
      expect(new Set(ids).size).to.equal(40);
      expect(await claim(db, 'server-c', 100)).to.have.length(0);
      expect(await nextDueInMs(db, 'fleets', where), 'every row is held').to.equal(null);

      await releaseLease(db, 'fleets', a[0].id, 'server-b', 0);
      const [held] = await db.query('SELECT lease_owner FROM fleets WHERE id = $1', [a[0].id]);
      expect(held.lease_owner).to.equal('server-a');
      await releaseLease(db, 'fleets', a[0].id, 'server-a', 0);
      expect((await claim(db, 'server-c', 100)).map((r) => r.id)).to.deep.equal([a[0].id]);

      // The loop sleeps until the earliest row nobody holds falls due, not a whole interval.
      await releaseLease(db, 'fleets', a[1].id, 'server-a', 30_000);
      await releaseLease(db, 'fleets', a[2].id, 'server-a', 5_000);
      expect(await claim(db, 'server-c', 100)).to.have.length(0);
      expect(await nextDueInMs(db, 'fleets', where)).to.be.within(4_000, 5_000);
    });

    it('lets another server take over a row whose lease ran out', async () => {
      const project = await upsertProject(db, 'expiry', [{ type: 'local' }]);
      await applyFleet(db, project.id, { name: 'x', spec: {}, requirement: REQUIREMENT, nodesMin: 0, nodesMax: 1, idleSeconds: 60, backends: ['local'] });
      const where = `project_id = '${project.id}'`;
      expect(await claimDue(db, 'fleets', 'crashed', 50, 10, where)).to.have.length(1);
      await new Promise((r) => setTimeout(r, 80));
      expect(await claimDue(second, 'fleets', 'survivor', 60_000, 10, where)).to.have.length(1);
    });

    it('keeps each log line once when an agent page is copied twice', async () => {
      const project = await upsertProject(db, 'logs', [{ type: 'local' }]);
      const user = await upsertUser(db, 'bob', 'bob-token', 'user');
      await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status) VALUES ('r1', $1, $2, 'r1', 'task', '{}', '{}', 'running')`, [project.id, user.id]);
      const lines = Array.from({ length: 5 }, (_, i) => ({ seq: i + 1, ts: new Date().toISOString(), stream: 'stdout' as const, text: `line ${i + 1}` }));
      await appendLogs(db, 'r1', lines.slice(0, 3), 1e9);
      await appendLogs(db, 'r1', lines.slice(0, 3), 1e9);
      await appendLogs(db, 'r1', lines.slice(3), 1e9);
      await appendLogs(db, 'r1', lines.slice(2), 1e9);
      expect((await appendLogs(db, 'r1', lines.slice(1), 1e9, 1)).stored, 'a copier whose cursor is behind').to.equal(false);
      const stored = await readLogs(db, 'r1', 0);
      expect(stored.map((l) => l.text)).to.deep.equal(lines.map((l) => l.text));
      expect((await readLogs(db, 'r1', 3)).map((l) => l.seq)).to.deep.equal([4, 5]);
      expect(await logTotals(db, 'r1')).to.include({ lastSeq: 5, droppedLines: 0 });
    });

    it('refuses lines for a run that does not exist, alone or beside another run\'s, and keeps none of them', async () => {
      const project = await upsertProject(db, 'log-orphans', [{ type: 'local' }]);
      const user = await upsertUser(db, 'erin', 'erin-token', 'user');
      await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status) VALUES ('o1', $1, $2, 'o1', 'task', '{}', '{}', 'running')`, [project.id, user.id]);
      const page = (runId: string) => ({ runId, after: 0, first: 1, last: 1, jsonLines: JSON.stringify({ seq: 1, ts: new Date().toISOString(), stream: 'stdout', text: 'hello' }) });
      const alone = await appendLogChunks(db, [page('no-such-run')], 1e9).catch((error: unknown) => error);
      expect(alone).to.include({ code: '23503' });
      const beside = await appendLogChunks(db, [page('o1'), page('no-such-run')], 1e9).catch((error: unknown) => error);
      expect(beside).to.include({ code: '23503' });
      const kept = await db.query(`SELECT run_id FROM log_chunks WHERE run_id IN ('o1', 'no-such-run') UNION ALL SELECT run_id FROM log_totals WHERE run_id IN ('o1', 'no-such-run')`);
      expect(kept).to.deep.equal([]);
      expect((await appendLogChunks(db, [page('o1')], 1e9)).get('o1')).to.include({ stored: true });
    });

    it('keeps a page of a line or two as it is and compresses longer ones, small or large, and reads all back', async () => {
      const project = await upsertProject(db, 'log-encodings', [{ type: 'local' }]);
      const user = await upsertUser(db, 'dave', 'dave-token', 'user');
      await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status) VALUES ('e1', $1, $2, 'e1', 'task', '{}', '{}', 'running')`, [project.id, user.id]);
      const line = (seq: number) => ({ seq, ts: new Date().toISOString(), stream: 'stdout' as const, text: `line ${seq} ${(seq * 7919).toString(36).repeat(seq % 5)}` });
      const lines = (first: number, count: number) => Array.from({ length: count }, (_, i) => line(first + i));
      await appendLogs(db, 'e1', [line(1)], 1e9);
      await appendLogs(db, 'e1', lines(2, 50), 1e9);
      // About 600 kB of text, 100 kB compressed: both compressed and read back off the event loop.
      await appendLogs(db, 'e1', lines(52, 8000), 1e9);
      const chunks = await db.query('SELECT first_seq, encoding, length(data) AS stored FROM log_chunks WHERE run_id = $1 ORDER BY first_seq', ['e1']);
      expect(chunks.map((chunk) => chunk.encoding)).to.deep.equal(['identity', 'deflate', 'deflate']);
      expect(Number(chunks[2].stored)).to.be.above(64 * 1024 / 6);
      expect((await readLogs(db, 'e1', 0, 10_000)).map((l) => l.text)).to.deep.equal(lines(1, 8051).map((l) => l.text));
    });

    it('stores the pages of several runs in one statement, each once and only after its run\'s last stored line', async () => {
      const project = await upsertProject(db, 'batched-logs', [{ type: 'local' }]);
      const user = await upsertUser(db, 'carol', 'carol-token', 'user');
      for (const id of ['b1', 'b2']) {
        await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status) VALUES ($1, $2, $3, $1, 'task', '{}', '{}', 'running')`, [id, project.id, user.id]);
      }
      const firstPages = [chunk('b1', 0, 1, 3), chunk('b2', 0, 1, 2)];
      const [a, b] = await Promise.all([appendLogChunks(db, firstPages, 1e9), appendLogChunks(second, firstPages, 1e9)]);
      expect(['b1', 'b2'].map((id) => Number(a.get(id)!.stored) + Number(b.get(id)!.stored)), 'two copiers of the same pages').to.deep.equal([1, 1]);
      const next = await appendLogChunks(db, [chunk('b1', 3, 4, 5), chunk('b2', 0, 1, 4)], 1e9);
      expect(next.get('b1')!.stored).to.equal(true);
      expect(next.get('b2')!.stored, 'a page read after a line the run is past').to.equal(false);
      const gap = await appendLogChunks(db, [chunk('b2', 2, 5, 6)], 1e9);
      expect(gap.get('b2')).to.deep.equal({ stored: true, droppedLines: 2, firstLoss: true });
      expect((await readLogs(db, 'b1', 0)).map((l) => l.text)).to.deep.equal(['b1 1', 'b1 2', 'b1 3', 'b1 4', 'b1 5']);
      expect((await readLogs(db, 'b2', 0)).map((l) => l.seq)).to.deep.equal([1, 2, 5, 6]);
      expect([...(await lastLogSeqs(db, ['b1', 'b2', 'none']))]).to.deep.equal([['b1', 5], ['b2', 6], ['none', 0]]);
    });

    it('claims the runs of an instance that fall due within a second together with its due run, once', async () => {
      const project = await upsertProject(db, 'watch-claim', [{ type: 'local' }]);
      const user = await upsertUser(db, 'dave', 'dave-token', 'user');
      const { fleet } = await applyFleet(db, project.id, { name: 'w', spec: {}, requirement: REQUIREMENT, nodesMin: 0, nodesMax: 2, idleSeconds: 60, backends: ['local'] });
      for (const id of ['wi1', 'wi2']) {
        await db.query(`INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, agent_url, agent_token, status) VALUES ($1, $2, $3, $1, 'local', '{}', 'http://agent', 't', 'busy')`, [id, project.id, fleet.id]);
      }
      const runs = [['due', 'wi1', 0], ['soon', 'wi1', 500], ['later', 'wi1', 5000], ['elsewhere', 'wi2', 500]] as const;
      for (const [id, instance, inMs] of runs) {
        await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status, instance_id, next_reconcile_at)
          VALUES ($1, $2, $3, $1, 'task', '{}', '{}', 'running', $4, now() + $5 * interval '1 millisecond')`, [id, project.id, user.id, instance, inMs]);
      }
      const where = `project_id = '${project.id}'`;
      const [a, b] = await Promise.all([claimWatchedRuns(db, 'server-a', 60_000, 100, where, 0, 1000), claimWatchedRuns(second, 'server-b', 60_000, 100, where, 0, 1000)]);
      expect([...a, ...b].map((row) => row.id).sort()).to.deep.equal(['due', 'soon']);
      const holder = a.length > 0 ? 'server-a' : 'server-b';
      await releaseLeases(db, 'runs', 'server-c', [{ id: 'due', nextInMs: 0 }]);
      expect(await claimWatchedRuns(db, 'server-c', 60_000, 100, where, 0, 1000), 'a release by another owner changes nothing').to.have.length(0);
      await releaseLeases(db, 'runs', holder, [{ id: 'due', nextInMs: 0 }, { id: 'soon', nextInMs: 3000 }]);
      expect((await claimWatchedRuns(db, 'server-c', 60_000, 100, where, 0, 1000)).map((row) => row.id)).to.deep.equal(['due']);
    });

    it("reads a run's instance and its last stored line in one query, and nothing for an instance that is gone", async () => {
      const project = await upsertProject(db, 'log-read', [{ type: 'local' }]);
      const user = await upsertUser(db, 'erin', 'erin-token', 'user');
      const { fleet } = await applyFleet(db, project.id, { name: 'l', spec: {}, requirement: REQUIREMENT, nodesMin: 0, nodesMax: 1, idleSeconds: 60, backends: ['local'] });
      await db.query(`INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, agent_url, agent_token, status) VALUES ('li1', $1, $2, 'li1', 'local', '{}', 'http://agent', 't', 'busy')`, [project.id, fleet.id]);
      for (const id of ['lr1', 'lr2']) {
        await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status, instance_id) VALUES ($1, $2, $3, $1, 'task', '{}', '{}', 'running', 'li1')`, [id, project.id, user.id]);
      }
      await appendLogChunks(db, [chunk('lr1', 0, 1, 3)], 1e9);
      const read = await instanceAndLastLogSeq(db, 'li1', 'lr1');
      expect(read!.instance).to.include({ id: 'li1', agentUrl: 'http://agent' });
      expect(read!.lastSeq).to.equal(3);
      expect((await instanceAndLastLogSeq(db, 'li1', 'lr2'))!.lastSeq, 'a run with no stored line').to.equal(0);
      expect(await instanceAndLastLogSeq(db, 'gone', 'lr1')).to.equal(null);
    });

    it('marks a provisioned instance busy when a run was placed on it after its controller read it, idle when none was', async () => {
      const project = await upsertProject(db, 'ready-race', [{ type: 'local' }]);
      const { fleet } = await applyFleet(db, project.id, { name: 'r', spec: {}, requirement: REQUIREMENT, nodesMin: 0, nodesMax: 2, idleSeconds: 60, backends: ['local'] });
      for (const id of ['placed-meanwhile', 'left-alone']) {
        await db.query(`INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, agent_token, status, lease_owner, lease_expires_at)
          VALUES ($1, $2, $3, $1, 'local', '{}', 't', 'provisioning', 'controller', now() + interval '1 minute')`, [id, project.id, fleet.id]);
      }
      // As the scheduler gives a provisioning instance its run, while the instance controller awaits the agent's health.
      await giveInstanceTo(db, 'placed-meanwhile', 'job-1', false);
      expect(await markInstanceReady(db, 'placed-meanwhile', 'controller', { agent_url: 'http://agent' })).to.equal('busy');
      expect(await markInstanceReady(db, 'left-alone', 'controller', { agent_url: 'http://agent' })).to.equal('idle');
      expect(await markInstanceReady(db, 'left-alone', 'another-server', { agent_url: 'http://other' }), 'without the lease').to.equal(null);
      const rows = await db.query(`SELECT id, status, run_id, agent_url, idle_since IS NOT NULL AS idle FROM instances WHERE project_id = $1 ORDER BY id`, [project.id]);
      expect(rows).to.deep.equal([
        { id: 'left-alone', status: 'idle', run_id: null, agent_url: 'http://agent', idle: true },
        { id: 'placed-meanwhile', status: 'busy', run_id: 'job-1', agent_url: 'http://agent', idle: false },
      ]);
    });

    it('gives a look at a running run every field of its record but the files and repos its job started with', async () => {
      const project = await upsertProject(db, 'watch-columns', [{ type: 'local' }]);
      const user = await upsertUser(db, 'erin', 'erin-token', 'user');
      const { fleet } = await applyFleet(db, project.id, { name: 'c', spec: {}, requirement: REQUIREMENT, nodesMin: 0, nodesMax: 1, idleSeconds: 60, backends: ['local'] });
      await db.query(`INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, agent_url, agent_token, status) VALUES ('ci1', $1, $2, 'ci1', 'local', '{}', 'http://agent', 't', 'busy')`, [project.id, fleet.id]);
      const files = [{ path: 'data.bin', contentBase64: Buffer.alloc(300_000, 7).toString('base64') }];
      const repos = [{ url: 'https://example.com/r.git', path: '/workflow' }];
      // Every column toRun maps holds a value, so that one left out of the watch's reads would show.
      await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, files, repos, requirement, generation, priority, status, status_message,
          termination_reason, desired, fleet_id, instance_id, blocks, job_id, exit_code, replica, submitted_at, started_at, finished_at,
          inactivity_stop_at, attempt, first_submitted_at, gpu_underused_since, next_reconcile_at)
        VALUES ('cr1', $1, $2, 'cr1', 'task', '{"commands": ["true"]}', $3, $4, '{}', 3, 7, 'running', 'on ci1', 'max_duration_exceeded', 'stop',
          $5, 'ci1', '{0,1}', 'job-1', 2, 4, now() - interval '1 hour', now() - interval '50 minutes', now(), now() + interval '1 minute', 2,
          now() - interval '2 hours', now() - interval '5 minutes', now())`,
        [project.id, user.id, files, repos, fleet.id]);
      const [whole] = await db.query(`SELECT * FROM runs WHERE id = 'cr1'`);
      const expected = { ...toRun(whole!), files: undefined, repos: [] };
      expect(toRun(whole!).files).to.deep.equal(files);
      const where = `project_id = '${project.id}'`;
      const [claimed] = await claimWatchedRuns(db, 'server-w', 60_000, 10, where, 0, 1000, WATCHED_RUN_COLUMNS);
      expect(toRun(claimed!)).to.deep.equal(expected);
      for (const renew of [[], ['cr1']]) {
        const [read] = await readHeldLeases(db, 'runs', 'server-w', ['cr1'], renew, 60_000, where, WATCHED_RUN_COLUMNS);
        expect(read!.still_held).to.equal(true);
        const { still_held: _, ...row } = read!;
        expect(toRun(row)).to.deep.equal(expected);
      }
    });

    it('keeps a run under its log limit by dropping the oldest lines, and counts lines lost before they arrived', async () => {
      const project = await upsertProject(db, 'capped', [{ type: 'local' }]);
      const user = await upsertUser(db, 'carol', 'carol-token', 'user');
      await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status) VALUES ('r2', $1, $2, 'r2', 'task', '{}', '{}', 'running')`, [project.id, user.id]);
      const page = (first: number, count: number) => Array.from({ length: count }, (_, i) => ({ seq: first + i, ts: new Date().toISOString(), stream: 'stdout' as const, text: 'x'.repeat(100) }));
      const pageBytes = JSON.stringify(page(1, 100)).length;
      const outcomes = [];
      for (let i = 0; i < 10; i++) outcomes.push(await appendLogs(db, 'r2', page(i * 100 + 1, 100), pageBytes * 3.5));
      expect(outcomes.map((o) => o.droppedLines)).to.deep.equal([0, 0, 0, 100, 100, 100, 100, 100, 100, 100]);
      expect(outcomes.map((o) => o.firstLoss)).to.deep.equal([false, false, false, true, false, false, false, false, false, false]);
      const totals = await logTotals(db, 'r2');
      expect(totals).to.include({ lastSeq: 1000, droppedLines: 700 });
      expect(totals.bytes).to.be.at.most(pageBytes * 3.5);
      const { lines, dropped } = await readLogPage(db, 'r2', 0);
      expect(dropped).to.equal(700);
      expect(lines.map((l) => l.seq)).to.deep.equal(Array.from({ length: 300 }, (_, i) => 701 + i));

      expect((await appendLogs(db, 'r2', page(1051, 10), pageBytes * 3.5)).stored).to.equal(false);
      const gap = await appendLogs(db, 'r2', page(1051, 10), pageBytes * 3.5, 1000);
      expect(gap.droppedLines).to.equal(50);
      expect((await logTotals(db, 'r2')).droppedLines).to.equal(750);
    });

    it('reads a long log whole and in order, from any line: many one-line chunks, chunks larger than one read, and a gap', async () => {
      const project = await upsertProject(db, 'long-log', [{ type: 'local' }]);
      const user = await upsertUser(db, 'dave', 'dave-token', 'user');
      await db.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status) VALUES ('r3', $1, $2, 'r3', 'task', '{}', '{}', 'running')`, [project.id, user.id]);
      const line = (seq: number, text = `line ${seq}`) => ({ seq, ts: new Date().toISOString(), stream: 'stdout' as const, text });
      for (let seq = 1; seq <= 3000; seq++) await appendLogs(db, 'r3', [line(seq)], 1e9);
      const big = 'y'.repeat(600 * 1024);
      for (let seq = 3001; seq <= 3003; seq++) await appendLogs(db, 'r3', [line(seq, big)], 1e9);
      await appendLogs(db, 'r3', [line(3010), line(3011)], 1e9, 3003);
      const seqs = async (after: number, until?: number) => {
        const read: number[] = [];
        for await (const text of logLinesAfter(db, 'r3', after, until)) if (text !== '') read.push(...text.split('\n').map((json) => (JSON.parse(json) as { seq: number }).seq));
        return read;
      };
      const range = (first: number, last: number) => Array.from({ length: last - first + 1 }, (_, i) => first + i);
      expect(await seqs(0)).to.deep.equal([...range(1, 3003), 3010, 3011]);
      let queries = 0;
      const counted: Queryable = { query: <T extends Row>(sql: string, params?: unknown[]) => { queries++; return db.query<T>(sql, params); } };
      for await (const text of logLinesAfter(counted, 'r3', 0, 3000)) expect(text).to.not.equal('');
      expect(queries, 'an hour of a line a second is one read, not one per few chunks').to.equal(1);
      expect(await seqs(2999, 3002)).to.deep.equal([3000, 3001, 3002]);
      expect(await seqs(3002)).to.deep.equal([3003, 3010, 3011]);
      expect(await seqs(3011)).to.deep.equal([]);
      const page = await readLogPage(db, 'r3', 1500);
      expect(page.lines.map((l) => l.seq)).to.deep.equal([...range(1501, 3003), 3010, 3011]);
      expect(page.lines[1501].text).to.equal(big);
    });

    it('moves the lines an older server stored one per row into chunks', async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
      const old = scratch ? openPostgres(scratch.url) : await openPglite();
      try {
        await old.exec(`CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
        for (const statement of MIGRATIONS[0].sql.split(/;\s*\n/).filter((s) => s.trim())) await old.query(statement);
        await old.query(`INSERT INTO schema_migrations (version, name) VALUES (1, 'initial')`);
        const project = await upsertProject(old, 'legacy', [{ type: 'local' }]);
        await old.query(`INSERT INTO users (id, name, token_hash) VALUES ('dave', 'dave', 'hash-of-dave-token')`);
        await old.query(`INSERT INTO runs (id, project_id, user_id, name, kind, spec, requirement, status) VALUES ('r3', $1, 'dave', 'r3', 'task', '{}', '{}', 'done')`, [project.id]);
        await old.query(`INSERT INTO logs (run_id, seq, ts, stream, text) SELECT 'r3', n, now(), CASE WHEN n % 2 = 0 THEN 'stderr' ELSE 'stdout' END, 'line ' || n FROM generate_series(1, 12000) AS n`);
        expect(await migrate(old)).to.deep.equal(MIGRATIONS.slice(1).map((m) => m.version));
        const lines = [];
        for (let after = 0; ;) {
          const page = await readLogs(old, 'r3', after);
          if (page.length === 0) break;
          lines.push(...page);
          after = page[page.length - 1].seq;
        }
        expect(lines.map((l) => l.seq)).to.deep.equal(Array.from({ length: 12000 }, (_, i) => i + 1));
        expect(lines[1]).to.include({ stream: 'stderr', text: 'line 2' });
        expect(Date.parse(lines[0].ts)).to.be.closeTo(Date.now(), 60_000);
        expect(await logTotals(old, 'r3')).to.include({ lastSeq: 12000, droppedLines: 0 });
      } finally {
        await old.close();
        await scratch?.drop();
      }
    });

    it('reads the replicas of several services in one query: each service its own, oldest first, and none for a service without', async () => {
      const project = await upsertProject(db, 'replicas', [{ type: 'local' }]);
      const user = await upsertUser(db, 'replica-owner', 'replica-owner-token', 'user');
      const service = (name: string) => insertRun(db, { projectId: project.id, userId: user.id, name, kind: 'service', spec: { type: 'service', port: 80, commands: ['serve'] }, files: [], requirement: REQUIREMENT, priority: 0 });
      const [web, api, idle] = await Promise.all(['web', 'api', 'idle'].map(service));
      for (const replica of [1, 0]) await insertReplica(db, web!, replica, null);
      await insertReplica(db, api!, 0, null);
      const replicas = await replicasOfServices(db, [web!.id, api!.id, idle!.id]);
      expect(replicas.get(web!.id)!.map((r) => [r.serviceId, r.replica])).to.deep.equal([[web!.id, 0], [web!.id, 1]]);
      expect(replicas.get(api!.id)!.map((r) => [r.serviceId, r.replica])).to.deep.equal([[api!.id, 0]]);
      expect(replicas.get(idle!.id)).to.deep.equal([]);
    });

    it('lists the newest runs first: active ones past newer finished ones, all of them up to the limit, never replicas or deleted runs', async () => {
      const project = await upsertProject(db, 'lists', [{ type: 'local' }]);
      const user = await upsertUser(db, 'list-owner', 'list-owner-token', 'user');
      const names = ['a1', 'a2', 'a3', 'a4', 'gone', 'f1', 'f2', 'web'];
      const runs = [];
      for (const name of names) {
        runs.push(await insertRun(db, { projectId: project.id, userId: user.id, name, kind: name === 'web' ? 'service' : 'task', spec: name === 'web' ? { type: 'service', port: 80, commands: ['serve'] } : { type: 'task', commands: ['true'] }, files: [], requirement: REQUIREMENT, priority: 0 }));
      }
      await insertReplica(db, runs[7]!, 0, null);
      // Submitted a minute apart in the order above; the replica is the newest row of all.
      await db.query(`UPDATE runs SET submitted_at = now() - interval '1 hour' + (array_position($2::text[], name) * interval '1 minute')
        WHERE project_id = $1 AND service_id IS NULL`, [project.id, names]);
      await db.query(`UPDATE runs SET status = 'done' WHERE project_id = $1 AND name IN ('f1', 'f2')`, [project.id]);
      await db.query(`UPDATE runs SET deleted = true WHERE project_id = $1 AND name = 'gone'`, [project.id]);
      const listed = async (includeFinished: boolean, limit: number) => (await listRunViews(db, project.id, includeFinished, limit)).map((r) => r.name);
      expect(await listed(false, 3)).to.deep.equal(['web', 'a4', 'a3']);
      expect(await listed(false, 10)).to.deep.equal(['web', 'a4', 'a3', 'a2', 'a1']);
      expect(await listed(true, 4)).to.deep.equal(['web', 'f2', 'f1', 'a4']);
    });

    it('delivers NOTIFY to a listener', async () => {
      const received: string[] = [];
      const unlisten = await db.listen('orchestrator_test', (payload) => received.push(payload));
      await second.notify('orchestrator_test', 'nudge');
      const deadline = Date.now() + 3000;
      while (received.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      await unlisten();
      expect(received).to.deep.equal(['nudge']);
    });
  });
}
