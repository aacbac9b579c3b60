import { expect } from 'chai';
import fc from 'fast-check';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ApplyResult, Fleet, Run } from '../api/objects.js';
import { addProject, endCliSuite, makeHome, runCli, show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const LOCAL_FLEET = { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' };
const sleeper = (name: string) => ({ type: 'task', name, commands: ['sleep 60'] });

// The cases run in order: the sleeper that the fourth one starts holds its name for the fifth.
for (const kind of DATABASE_KINDS) {
  describe(`apply as one batch, all or nothing (${kind})`, function () {
    this.timeout(90_000);
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    let work: string;
    const cli = (args: string[]) => runCli(args, { home: home.home, cwd: work });
    const fleets = async () => ((await server.api('GET', '/api/projects/main/fleets?all=true')).body as Fleet[]).map((f) => f.name);
    const runs = async () => (await server.api('GET', '/api/projects/main/runs?all=true')).body as Run[];
    const folder = (name: string, files: Record<string, string>) => {
      const dir = join(work, name);
      mkdirSync(dir);
      for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
      return dir;
    };

    before(async function () {
      this.timeout(120_000);
      server = await startTestServer(kind, LOCAL_CONFIG);
      home = makeHome();
      work = mkdtempSync(join(tmpdir(), 'orch-batch-'));
      await addProject(home.home, server.url);
    });

    after(async function () {
      this.timeout(60_000);
      await endCliSuite(server, home, work);
    });

    it('creates nothing when a run of the folder names a file that does not exist', async () => {
      const dir = folder('missing-file', {
        'a.yml': 'type: fleet\nname: local\nbackends: [local]\nnodes: 0..1\n',
        'b.yml': 'type: task\nname: train\nfiles:\n  - data.csv\ncommands:\n  - cat data.csv\n',
      });
      const result = await cli(['apply', '-f', dir, '-y']);
      expect(result.code, show(result)).to.equal(1);
      expect(result.stderr).to.contain(`${join(dir, 'b.yml')}: files: "data.csv": `);
      expect(result.stderr).to.contain('data.csv does not exist');
      expect(result.stderr).to.contain('nothing was applied');
      expect(result.stderr).not.to.contain('fleet local: create');
      expect(await fleets()).to.deep.equal([]);
      expect(await runs()).to.deep.equal([]);
    });

    it('answers 422 naming every problem by item and field, and writes nothing', async () => {
      const response = await server.api('POST', '/api/projects/main/apply', {
        items: [
          { spec: LOCAL_FLEET },
          { spec: { type: 'task', name: 'bad', commands: ['true'], resources: { gpu: 'H10' } } },
          { spec: sleeper('files'), files: [{ path: '../out', contentBase64: '' }] },
          { spec: { ...LOCAL_FLEET, nodes: '0..2' } },
        ],
      });
      expect(response.status, JSON.stringify(response.body)).to.equal(422);
      const details = response.body.error.details as { index: number; path: string; message: string }[];
      expect(details.map((d) => [d.index, d.path])).to.deep.equal([[1, 'spec.resources.gpu'], [2, 'files[0].path'], [3, 'spec.name']]);
      expect(response.body.error.message).to.match(/^nothing was applied: items\[1\]\.spec\.resources\.gpu: .*H10/);
      expect(await fleets()).to.deep.equal([]);
      expect(await runs()).to.deep.equal([]);
    });

    it('writes a fleet and a run together, and the run lands on that fleet', async () => {
      const response = await server.api('POST', '/api/projects/main/apply', {
        items: [{ spec: LOCAL_FLEET }, { spec: { type: 'task', name: 'greet', files: ['hi.txt'], commands: ['cat hi.txt'] }, files: [{ path: 'hi.txt', contentBase64: Buffer.from('hi\n').toString('base64') }] }],
      });
      expect(response.status, JSON.stringify(response.body)).to.equal(201);
      const result = response.body as ApplyResult;
      expect(result.items.map((item) => item.kind === 'run' ? [item.kind, item.run.name] : item.kind === 'fleet' ? [item.kind, item.fleet.name, item.action] : [item.kind]))
        .to.deep.equal([['fleet', 'local', 'create'], ['run', 'greet']]);
      const run = result.items[1]!;
      expect(run.kind === 'run' && run.run.status, 'the scheduler may have taken the run already').to.be.oneOf(['submitted', 'provisioning', 'running', 'done']);
      await eventually(async () => (await runs()).find((r) => r.name === 'greet' && r.status === 'done'), 30_000, 'greet done');
      const logs = await cli(['logs', 'greet']);
      expect(logs.stdout).to.equal('hi\n');
    });

    it('applies a folder of a fleet and a run through the CLI, planning the run on the fleet being applied', async () => {
      const dir = folder('fleet-and-run', {
        'a.yml': 'type: fleet\nname: spare\nbackends: [local]\nnodes: 0..1\n',
        'b.yml': 'type: task\nname: sleeper\ncommands:\n  - sleep 60\n',
      });
      const result = await cli(['apply', '-f', dir, '-y', '-d']);
      expect(result.code, show(result)).to.equal(0);
      expect(result.stderr).to.match(/^ {2}fleets\s+local, spare$/m);
      expect(result.stderr).to.contain('fleet spare: created');
      expect(result.stderr).to.contain('task sleeper submitted');
      expect(await fleets()).to.deep.equal(['local', 'spare']);
      await eventually(async () => (await runs()).find((r) => r.name === 'sleeper' && r.status === 'running'), 30_000, 'sleeper running');
    });

    it('creates nothing when a run name of the batch is still in use (409)', async () => {
      const response = await server.api('POST', '/api/projects/main/apply', {
        items: [{ spec: { type: 'fleet', name: 'other', backends: ['local'], nodes: '0..1' } }, { spec: sleeper('sleeper') }],
      });
      expect(response.status, JSON.stringify(response.body)).to.equal(409);
      expect(response.body.error.message).to.match(/^nothing was applied: items\[1\]: run sleeper is still active/);
      expect(response.body.error.details).to.deep.equal({ index: 1 });

      const dir = folder('taken-name', {
        'a.yml': 'type: fleet\nname: other\nbackends: [local]\nnodes: 0..1\n',
        'b.yml': 'type: task\nname: sleeper\ncommands:\n  - sleep 1\n',
      });
      const result = await cli(['apply', '-f', dir, '-y', '-d']);
      expect(result.code, show(result)).to.equal(1);
      expect(result.stderr).to.contain(`error: nothing was applied: ${join(dir, 'b.yml')}: run sleeper is still active`);
      expect(await fleets()).to.deep.equal(['local', 'spare']);
      expect((await runs()).map((r) => r.name).sort()).to.deep.equal(['greet', 'sleeper']);
      await server.api('POST', '/api/projects/main/runs/sleeper/stop', { abort: true });
    });

    it('answers 201 to one and 409 to the others when the same run name is applied at the same moment', async () => {
      await server.api('POST', '/api/projects/main/apply', { items: [{ spec: LOCAL_FLEET }] });
      const applies = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 === 0
        ? server.api('POST', '/api/projects/main/apply', { items: [{ spec: sleeper('racer') }] })
        : server.api('POST', '/api/projects/main/runs/apply', { spec: sleeper('racer') }))));
      const statuses = applies.map((a) => a.status).sort();
      expect(statuses.filter((s) => s === 201), JSON.stringify(applies.map((a) => a.body))).to.have.length(1);
      expect(statuses.filter((s) => s !== 201)).to.deep.equal([409, 409, 409, 409, 409]);
      await server.api('POST', '/api/projects/main/runs/racer/stop', { abort: true });
    });

    it('answers each run of a batch with its own view, queued runs with their places in the queue', async () => {
      const queued = (name: string, priority: number) => ({ spec: { type: 'task', name, priority, fleets: ['full'], commands: ['true'] } });
      const response = await server.api('POST', '/api/projects/main/apply', {
        items: [queued('low', 10), { spec: { type: 'fleet', name: 'full', backends: ['local'], nodes: '0..0' } }, queued('high', 90), queued('mid', 50)],
      });
      expect(response.status, JSON.stringify(response.body)).to.equal(201);
      const views = (response.body as ApplyResult).items.flatMap((item) => (item.kind === 'run' ? [item.run] : []));
      expect(views.map((run) => [run.name, run.priority, run.status, run.queuePosition])).to.deep.equal([
        ['low', 10, 'submitted', 3], ['high', 90, 'submitted', 1], ['mid', 50, 'submitted', 2],
      ]);
      // Alone in its answer, a run still counts those queued ahead of it that the answer leaves out.
      const later = await server.api('POST', '/api/projects/main/apply', { items: [queued('later', 50)] });
      expect((later.body as ApplyResult).items.map((item) => (item.kind === 'run' ? item.run.queuePosition : null))).to.deep.equal([3]);
      for (const name of ['low', 'high', 'mid', 'later']) await server.api('POST', `/api/projects/main/runs/${name}/stop`, { abort: true });
    });

    it('never answers 5xx to random batches and plans, always in the one error shape', async () => {
      const spec = fc.oneof(
        fc.constantFrom<unknown>(LOCAL_FLEET, { ...LOCAL_FLEET, backends: ['gpucloud'] }, { type: 'task', commands: ['true'] }, sleeper('fuzz'), { type: 'service', port: 80, commands: ['true'] }),
        fc.anything(),
      );
      const files = fc.oneof(fc.constant(undefined), fc.array(fc.record({ path: fc.constantFrom('a', '../x', ''), contentBase64: fc.constantFrom('', 'eA==', '!') }), { maxLength: 2 }), fc.anything());
      const item = fc.oneof(fc.record({ spec, files }, { requiredKeys: ['spec'] }), fc.anything());
      await fc.assert(fc.asyncProperty(fc.oneof(fc.array(item, { maxLength: 4 }), fc.anything()), fc.oneof(fc.array(spec, { maxLength: 2 }), fc.anything()), async (items, fleetsApplied) => {
        for (const [path, body] of [['/api/projects/main/apply', { items }], ['/api/projects/main/runs/plan', { spec: { type: 'task', commands: ['true'] }, fleets: fleetsApplied }]] as const) {
          const response = await server.api('POST', path, body);
          expect(response.status, `${path} ${JSON.stringify(body)} → ${JSON.stringify(response.body)}`).to.be.lessThan(500);
          if (response.status >= 400) expect(Object.keys(response.body.error)).to.include.members(['code', 'message']);
        }
      }), { numRuns: 100 });
    });
  });
}
