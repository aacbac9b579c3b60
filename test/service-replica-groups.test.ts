import { expect } from 'chai';
import { cpSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Event, Run } from '../api/objects.js';
import { endCliSuite, runCli, show, startLocalCliSuite, type LocalCliSuite } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { startLoad } from './helpers/load.js';
import { eventually } from './helpers/server.js';

const REPO = resolve(import.meta.dirname, '..');
const NAME = 'mixed';
const MODELS = `/proxy/services/main/${NAME}/v1/models`;

/** The echo-llm server, its model named after `model`, so that an answer says which group's command gave it. */
const serve = (model: string) => [`MODEL=${model} node echo-llm/server.mjs`];

/** Service `mixed` with two replica groups: `big` of one replica and `small` of two, each with its own command. */
function groupsSpec(groups: { big?: Record<string, unknown>; small?: Record<string, unknown> } = {}): Record<string, unknown> {
  return {
    type: 'service', name: NAME, port: 8000, files: ['echo-llm/server.mjs'],
    probes: [{ type: 'http', url: '/health', interval: '1s' }],
    replicas: [
      { name: 'big', count: 1, commands: serve('big'), ...groups.big },
      { name: 'small', count: 2, commands: serve('small'), ...groups.small },
    ],
  };
}

for (const kind of DATABASE_KINDS) {
  describe(`a service with replica groups (${kind})`, function () {
    this.timeout(300_000);
    let suite: LocalCliSuite;
    const cli = (args: string[]) => runCli(args, { home: suite.home.home, cwd: suite.work, timeoutMs: 180_000, env: { COLUMNS: '400' } });
    const apply = (spec: Record<string, unknown>, file: string) => {
      writeFileSync(join(suite.work, file), JSON.stringify(spec));
      return cli(['apply', '-f', file, '-y']);
    };
    const view = async () => (await suite.server.api('GET', `/api/projects/main/runs/${NAME}`)).body as Run;
    const ready = (run: Run) => run.service!.replicas.filter((r) => r.state === 'ready');
    /** Which group each live replica belongs to, the commands it runs and its generation, by run id. */
    const replicaRows = async () => (await suite.server.db.query(
      `SELECT id, replica_group, generation, spec->'commands' AS commands FROM runs
       WHERE service_id IS NOT NULL AND status NOT IN ('terminated', 'failed', 'done') AND draining_since IS NULL ORDER BY replica`))
      .map((r) => ({ id: r.id as string, group: r.replica_group as string, generation: r.generation as number, commands: r.commands as string[] }));
    /** The models that answer through the proxy over `count` requests: which groups' replicas it reached. */
    const answeredBy = async (count: number) => {
      const models = new Set<string>();
      for (let i = 0; i < count; i++) {
        const response = await fetch(`${suite.server.url}${MODELS}`, { headers: { authorization: `Bearer ${suite.server.adminToken}` } });
        expect(response.status).to.equal(200);
        for (const model of ((await response.json()) as { data: Array<{ id: string }> }).data) models.add(model.id);
      }
      return [...models].sort();
    };

    before(async function () {
      this.timeout(120_000);
      suite = await startLocalCliSuite(kind);
      cpSync(join(REPO, 'examples', 'services', 'echo-llm'), join(suite.work, 'echo-llm'), { recursive: true });
    });
    afterEach(async function () {
      this.timeout(60_000);
      await cli(['stop', NAME]);
    });
    after(async function () {
      this.timeout(60_000);
      await endCliSuite(suite?.server, suite?.home, suite?.work);
    });

    it('runs each group\'s count with its own command, balances over both, and rolls only the group whose spec changed', async () => {
      const first = await apply(groupsSpec(), 'v1.yml');
      expect(first.code, show(first)).to.equal(0);
      const run = await eventually(async () => {
        const current = await view();
        return ready(current).length === 3 ? current : null;
      }, 90_000, 'three ready replicas');
      expect(run.service!.desiredReplicas).to.equal(3);
      expect(run.service!.replicas.map((r) => r.group).sort()).to.deep.equal(['big', 'small', 'small']);
      const rows = await replicaRows();
      for (const row of rows) expect(row.commands, row.group).to.deep.equal(serve(row.group));
      expect(await answeredBy(40)).to.deep.equal(['big', 'small']);

      const ps = await cli(['ps']);
      expect(ps.code, show(ps)).to.equal(0);
      expect(ps.stdout).to.match(/^mixed\s+service\s+running \(3\/3 ready/m);
      expect(ps.stdout.match(/^ {2}replica \d+ \(group big\)\s+ready/gm)).to.have.length(1);
      expect(ps.stdout.match(/^ {2}replica \d+ \(group small\)\s+ready/gm)).to.have.length(2);

      const bigBefore = rows.find((r) => r.group === 'big')!;
      const load = startLoad(`${suite.server.url}${MODELS}`, { token: suite.server.adminToken, workers: 2, pauseMs: 20, expectBody: /"id":"(big|small|small-2)"/ });
      const update = await apply(groupsSpec({ small: { commands: serve('small-2') } }), 'v2.yml');
      expect(update.code, show(update)).to.equal(0);
      const rolled = await eventually(async () => {
        const current = await view();
        const small = ready(current).filter((r) => r.group === 'small' && r.generation === 2);
        return small.length === 2 && current.service!.replicas.length === 3 && ready(current).length === 3 ? current : null;
      }, 120_000, 'the small group rolled to generation 2');
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
      expect(rolled.service!.stableGeneration).to.equal(2);
      const after = await replicaRows();
      const bigAfter = after.find((r) => r.group === 'big')!;
      expect(bigAfter.id, 'the big group\'s replica kept running').to.equal(bigBefore.id);
      expect(bigAfter.generation).to.equal(2);
      expect(after.filter((r) => r.group === 'small').map((r) => r.commands)).to.deep.equal([serve('small-2'), serve('small-2')]);
      expect(await answeredBy(40)).to.deep.equal(['big', 'small-2']);
    });

    it('keeps the other group serving untouched while a broken group\'s rollout stalls, and service rollback puts the group back', async () => {
      const first = await apply(groupsSpec(), 'v1.yml');
      expect(first.code, show(first)).to.equal(0);
      await eventually(async () => ready(await view()).length === 3, 90_000, 'three ready replicas');
      const before = await replicaRows();
      const load = startLoad(`${suite.server.url}${MODELS}`, { token: suite.server.adminToken, workers: 2, pauseMs: 20, expectBody: /"id":"(big|small)"/ });
      const broken = await apply(groupsSpec({ small: { commands: ['exit 1'] } }), 'broken.yml');
      expect(broken.code, show(broken)).to.equal(1);
      expect(broken.stderr, show(broken)).to.match(/^error: mixed: rollout of generation 2 failed: 3 replicas in a row ended before becoming ready; the last: exited with code 1; /m);
      const stalled = await view();
      expect(stalled.service!.stall).to.deep.include({ generation: 2, reason: 'failing' });
      const rows = await replicaRows();
      expect(rows.filter((r) => r.group === 'big').map((r) => r.id), 'no replica of the big group started').to.deep.equal(before.filter((r) => r.group === 'big').map((r) => r.id));
      expect(rows.filter((r) => r.group === 'small').map((r) => r.id), 'the small group\'s replicas of generation 1 serve on').to.deep.equal(before.filter((r) => r.group === 'small').map((r) => r.id));

      const rollback = await cli(['service', 'rollback', NAME]);
      expect(rollback.code, show(rollback)).to.equal(0);
      expect(rollback.stdout).to.equal('mixed: back to generation 1\n');
      await eventually(async () => (await view()).statusMessage === '3/3 replicas ready', 30_000, 'the status to settle');
      const back = await view();
      expect(back.service!.stall).to.equal(null);
      expect(back.service!.replicas.map((r) => [r.group, r.generation, r.state])).to.have.deep.members([['big', 1, 'ready'], ['small', 1, 'ready'], ['small', 1, 'ready']]);
      expect((await replicaRows()).map((r) => r.id).sort(), 'no replica restarted').to.deep.equal(before.map((r) => r.id).sort());
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
    });

    it('scales a group\'s count range on its own while the other group keeps its count', async () => {
      const scaling = { metric: 'rps', target: 2, window: '5s', scale_up_delay: '0s', scale_down_delay: '1h' };
      const first = await apply(groupsSpec({ small: { count: '1..3', scaling } }), 'scaled.yml');
      expect(first.code, show(first)).to.equal(0);
      await eventually(async () => ready(await view()).length === 2, 90_000, 'one ready replica in each group');
      const load = startLoad(`${suite.server.url}${MODELS}`, { token: suite.server.adminToken, workers: 2, pauseMs: 50 });
      const scaled = await eventually(async () => {
        const current = await view();
        return ready(current).filter((r) => r.group === 'small').length === 3 ? current : null;
      }, 90_000, 'three ready replicas in the small group');
      await load.stop();
      expect(load.failures, load.failures.slice(0, 5).join('\n')).to.deep.equal([]);
      expect(scaled.service!.replicas.filter((r) => r.group === 'big')).to.have.length(1);
      expect(scaled.service!.desiredReplicas).to.equal(4);
      const events = (await suite.server.api('GET', '/api/projects/main/events')).body as Event[];
      const scalings = events.filter((e) => e.reason === 'Scaled').map((e) => e.message);
      expect(scalings.length, scalings.join(', ')).to.be.greaterThan(0);
      expect(scalings.every((m) => m.startsWith('group small: ')), scalings.join(', ')).to.equal(true);
    });
  });
}
