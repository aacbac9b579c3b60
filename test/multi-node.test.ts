import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import winston from 'winston';
import { jobEnvironment } from '../agent/runtime.js';
import type { Offer } from '../api/offer.js';
import { normalizeResources } from '../api/resources.js';
import type { BackendPool } from '../controllers/backend-pool.js';
import { NodesController } from '../controllers/nodes-controller.js';
import { Scheduler } from '../controllers/scheduler.js';
import type { Db, Queryable } from '../store/db.js';
import { applyFleet } from '../store/fleets.js';
import { insertInstance } from '../store/instances.js';
import { migrate } from '../store/migrations.js';
import { openPglite } from '../store/pglite.js';
import { openPostgres } from '../store/postgres.js';
import { upsertProject, upsertUser } from '../store/projects.js';
import { insertNode } from '../store/nodes.js';
import { insertRun } from '../store/runs.js';
import { runCli, show } from './helpers/cli.js';
import { createScratchDatabase, DATABASE_KINDS } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';
import { useLocalCliSuite } from './helpers/local-cli-hooks.js';
import { eventually } from './helpers/server.js';

const REPO = join(import.meta.dirname, '..');

const PRINT_ENV = [
  'echo "rank=$ORCHESTRATOR_NODE_RANK of=$ORCHESTRATOR_NODES_NUM master=$ORCHESTRATOR_MASTER_NODE_IP gpus=$ORCHESTRATOR_GPUS_PER_NODE/$ORCHESTRATOR_GPUS_NUM"',
  'echo "ips=$(printf %s "$ORCHESTRATOR_NODES_IPS" | tr "\\n" ,)"',
];

function task(name: string, nodes: number, gpu: string, commands: string[]): string {
  return [`type: task`, `name: ${name}`, `nodes: ${nodes}`, 'resources:', `  gpu: ${gpu}`, 'commands:', ...commands.map((c) => `  - ${JSON.stringify(c)}`), ''].join('\n');
}

describe('multi-node tasks through the CLI on the gpucloud emulator (pglite)', function () {
  this.timeout(90_000);
  let suite: GpucloudSuite;
  useGpucloudSuite('pglite', (started) => { suite = started; });

  it('runs one job per node with its rank, the nodes\' addresses and the GPUs of all, and shows every node in logs and ps', async () => {
    await suite.apply('pair', task('pair', 2, 'L4', PRINT_ENV));
    const run = await suite.waitFor('pair', (r) => r.status === 'done', 'the 2-node task to finish');
    expect(run.nodes!.map((node) => [node.rank, node.status])).to.deep.equal([[0, 'done'], [1, 'done']]);
    const [first, second] = run.nodes!.map((node) => node.instance);
    expect(first).to.be.a('string').and.not.equal(second);
    const cloud = await suite.cloudInstances();
    const address = (instance: string | null) => new URL(cloud.find((i) => i.name === instance)!.agent_url!).hostname;
    const master = address(first!);

    const logs = await suite.cli(['logs', 'pair']);
    expect(logs.code, show(logs)).to.equal(0);
    for (const rank of [0, 1]) {
      expect(logs.stdout).to.contain(`[rank ${rank}] rank=${rank} of=2 master=${master} gpus=1/2\n`);
      expect(logs.stdout).to.contain(`[rank ${rank}] ips=${master},${address(rank === 0 ? first! : second!)}\n`);
    }
    const afterCursors = await fetch(`${suite.server.url}/api/projects/main/runs/pair/logs?format=jsonl&after=2,1`, { headers: { authorization: 'Bearer test-admin-token' } });
    expect((await afterCursors.text()).trim().split('\n').map((line) => JSON.parse(line)).map((line) => [line.node, line.seq])).to.deep.equal([[1, 2]]);
    const one = await suite.cli(['logs', 'pair', '--node', '1']);
    expect(one.stdout).to.equal(`rank=1 of=2 master=${master} gpus=1/2\nips=${master},${address(second!)}\n`);

    const ps = await suite.cli(['ps', '-a']);
    expect(ps.stdout).to.match(/^pair\s+task\s+done\s+2×L4/m);
    expect(ps.stdout).to.match(new RegExp(`^  node 0\\s+done\\s.*on ${first}`, 'm'));
    expect(ps.stdout).to.match(new RegExp(`^  node 1\\s+done\\s.*on ${second}`, 'm'));
  });

  it('logs and logs -f print every node\'s lines in time order, not one node\'s after the other\'s', async () => {
    await suite.apply('turns', task('turns', 2, 'L4', ['echo "first $ORCHESTRATOR_NODE_RANK"; sleep 4; echo "second $ORCHESTRATOR_NODE_RANK"']));
    await suite.waitFor('turns', (r) => r.status === 'done', 'the 2-node task to finish');
    const logs = await suite.cli(['logs', 'turns']);
    const followed = await suite.cli(['logs', '-f', 'turns']);
    expect(followed.code, show(followed)).to.equal(0);
    const lines = followed.stdout.trimEnd().split('\n');
    expect(lines.slice(0, 2).sort()).to.deep.equal(['[rank 0] first 0', '[rank 1] first 1']);
    expect(lines.slice(2).sort()).to.deep.equal(['[rank 0] second 0', '[rank 1] second 1']);
    expect(followed.stdout).to.equal(logs.stdout);
  });

  it('metrics shows each running node\'s use, or the node asked for', async () => {
    await suite.apply('busy', task('busy', 2, 'L4', ['sleep 300']));
    await suite.waitFor('busy', (r) => r.nodes?.every((node) => node.status === 'running') === true, 'both nodes to run');
    const every = await suite.cli(['metrics', 'busy']);
    expect(every.code, show(every)).to.equal(0);
    expect(every.stdout).to.match(/^node 0 \(on \S+\)\nCPU\s+MEMORY\n/);
    expect(every.stdout).to.match(/^node 1 \(on \S+\)\nCPU\s+MEMORY\n/m);
    expect(every.stdout).to.match(/^0\s+L4\s+\d+%/m);
    const one = await suite.cli(['metrics', 'busy', '--node', '1', '--json']);
    expect((JSON.parse(one.stdout) as { gpus: { name: string }[] }).gpus.map((gpu) => gpu.name)).to.deep.equal(['L4']);
    const unpicked = await suite.server.api('GET', '/api/projects/main/runs/busy/metrics');
    expect(unpicked.status).to.equal(409);
    expect(unpicked.body.error).to.deep.include({ code: 'node_needed', message: 'run busy is a task of 2 nodes: metrics are each node\'s; ask for one with node=N (running: 0, 1)' });
    expect((await suite.cli(['stop', 'busy'])).code).to.equal(0);
  });

  it('fails the run when one node fails, stops the other, and gives every instance back', async () => {
    const file = join(suite.work, 'broken.yml');
    writeFileSync(file, task('broken', 2, 'L4', ['if [ "$ORCHESTRATOR_NODE_RANK" = 1 ]; then echo giving up; exit 3; fi; echo waiting; sleep 300']));
    const applied = await suite.cli(['apply', '-f', file, '-y']);
    expect(applied.code, show(applied)).to.equal(3);
    expect(applied.stdout).to.contain('[rank 1] giving up\n');
    const run = (await suite.run('broken'))!;
    expect(run).to.include({ status: 'failed', terminationReason: 'failed_by_user_code', exitCode: 3, statusMessage: 'node 1: exited with code 3' });
    expect(run.nodes!.map((node) => [node.rank, node.status])).to.deep.equal([[0, 'terminated'], [1, 'failed']]);
    await eventually(async () => {
      const instances = (await suite.server.api('GET', '/api/projects/main/instances')).body as { status: string; run: string | null }[];
      return instances.every((instance) => instance.run === null && instance.status !== 'busy');
    }, 10_000, 'every instance to be given back');
  });

  it('with stop_criteria: master-done, is done once node 0 exits 0, stopping the other nodes', async () => {
    const file = join(suite.work, 'master-done.yml');
    writeFileSync(file, `${task('master-done', 2, 'L4', ['if [ "$ORCHESTRATOR_NODE_RANK" = 0 ]; then echo master finished; exit 0; fi; echo serving; sleep 300'])}stop_criteria: master-done\n`);
    const applied = await suite.cli(['apply', '-f', file, '-y']);
    expect(applied.code, show(applied)).to.equal(0);
    expect(applied.stdout).to.contain('[rank 0] master finished\n');
    const run = (await suite.run('master-done'))!;
    expect(run).to.include({ status: 'done', exitCode: 0, statusMessage: 'node 0 exited with code 0 (stop_criteria: master-done); the other nodes were stopped' });
    expect(run.nodes!.map((node) => [node.rank, node.status])).to.deep.equal([[0, 'done'], [1, 'terminated']]);
  });

  it('starts node 0 before the other nodes with startup_order: master-first, and after them with workers-first', async () => {
    for (const order of ['master-first', 'workers-first']) {
      const name = `${order.split('-')[0]}-order`;
      await suite.apply(name, `${task(name, 3, 'L4', ['echo started'])}startup_order: ${order}\n`);
      const run = await suite.waitFor(name, (r) => r.status === 'done', `the ${order} task to finish`);
      const [master, ...workers] = run.nodes!.map((node) => Date.parse(node.startedAt!));
      const firstWorker = Math.min(...workers);
      const lastWorker = Math.max(...workers);
      if (order === 'master-first') expect(firstWorker, `${order}: every worker starts after node 0`).to.be.greaterThan(master!);
      else expect(master, `${order}: node 0 starts after every worker`).to.be.greaterThan(lastWorker);
    }
  });

  it('keeps a task that needs more nodes than its fleet may have queued, saying so, without taking an instance', async () => {
    await suite.apply('h100', 'type: fleet\nname: h100\nbackends: [gpucloud]\nnodes: 0..2\nresources:\n  gpu: H100\n');
    const applied = await suite.apply('wide', task('wide', 3, 'H100', ['true']));
    const reason = 'fleet h100 has at most 2 nodes and the task needs 3 (nodes: 3)';
    expect(applied.stderr).to.match(new RegExp(`^  problem\\s+waiting for 3 instances at once: ${reason.replace(/[()]/g, '\\$&')}$`, 'm'));
    const queued = await suite.waitFor('wide', (r) => r.statusMessage.includes(reason), 'the queue reason');
    expect(queued.status).to.equal('submitted');
    expect((await suite.cli(['ps'])).stdout, 'its place in the queue').to.match(/^wide\s+task\s+submitted \(#1\)/m);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const fleet = (await suite.server.api('GET', '/api/projects/main/fleets/h100')).body as { instances: unknown[] };
    expect(fleet.instances).to.deep.equal([]);
    expect((await suite.cloudInstances()).filter((i) => i.gpu.model === 'H100')).to.deep.equal([]);
    expect((await suite.run('wide'))!.status).to.equal('submitted');
    expect((await suite.cli(['stop', 'wide'])).code).to.equal(0);
  });
});

describe('the multi-node example on the local fleet (pglite)', function () {
  this.timeout(90_000);
  const current = useLocalCliSuite('pglite');

  it('works as written: both nodes print their rank, node 0\'s address as the master\'s', async () => {
    const applied = await runCli(['apply', '-f', join(REPO, 'examples', 'tasks', 'multi-node.yml'), '-y'], { home: current().home.home, cwd: current().work });
    expect(applied.code, show(applied)).to.equal(0);
    expect(applied.stdout.split('\n').sort().join('\n')).to.equal('\n[rank 0] node 0 of 2, master at 127.0.0.1\n[rank 1] node 1 of 2, master at 127.0.0.1');
  });
});

describe('the environment of a multi-node task\'s job', () => {
  const job = (nodes?: { rank: number; ips: string[] }) => jobEnvironment({ jobId: 'j', runName: 'train', commands: [], env: {}, files: [], ports: [], gpus: 8, nodes });

  it('names the job\'s rank, the master\'s address and every node\'s in rank order, and the GPUs of one node and of all', () => {
    expect(job({ rank: 2, ips: ['10.0.0.7', '10.0.0.5', '10.0.0.9'] })).to.include({
      ORCHESTRATOR_NODE_RANK: '2', ORCHESTRATOR_NODES_NUM: '3', ORCHESTRATOR_MASTER_NODE_IP: '10.0.0.7',
      ORCHESTRATOR_NODES_IPS: '10.0.0.7\n10.0.0.5\n10.0.0.9', ORCHESTRATOR_GPUS_PER_NODE: '8', ORCHESTRATOR_GPUS_NUM: '24',
    });
  });

  it('keeps the GPUs of the one instance for a job without nodes', () => {
    expect(job()).to.include({ ORCHESTRATOR_GPUS_NUM: '8' }).and.not.have.property('ORCHESTRATOR_NODE_RANK');
  });
});

/** A database whose transactions fail at the given statement, as a server killed there would leave them: rolled back. */
function failingAt(db: Db, failsOn: (sql: string) => boolean): Db {
  return {
    ...db,
    transaction: <T>(fn: (tx: Queryable) => Promise<T>) => db.transaction((tx) => fn({
      query: (sql, params) => {
        if (failsOn(sql)) throw new Error('the server died here');
        return tx.query(sql, params);
      },
    })),
  };
}

const OFFER: Offer = { backend: 'local', offerId: 'machine', gpu: { name: '', memoryMib: 0, count: 0 }, cpus: 2, memoryMib: 4096, diskMib: 10_240, region: 'here', pricePerHour: 0, availability: 'available' };

for (const kind of DATABASE_KINDS) {
  describe(`multi-node placement after a crash (${kind})`, function () {
    this.timeout(30_000);

    it('leaves no instance held when the server dies between two nodes, and places all of them on the next pass', async () => {
      const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
      const db = scratch ? openPostgres(scratch.url) : await openPglite();
      try {
        await migrate(db);
        const project = await upsertProject(db, 'main', [{ type: 'local' }]);
        const user = await upsertUser(db, 'admin', 'token', 'admin');
        await applyFleet(db, project.id, { name: 'local', spec: {}, requirement: normalizeResources(undefined, 'fleet'), nodesMin: 0, nodesMax: 4, idleSeconds: null, backends: ['local'] });
        const run = await insertRun(db, {
          projectId: project.id, userId: user.id, name: 'pair', kind: 'task', spec: { type: 'task', name: 'pair', nodes: 2, commands: ['true'] },
          files: [], requirement: normalizeResources(undefined, 'run'), priority: 0,
        });
        const pool = { offers: async () => ({ offers: [OFFER], backends: [], errors: [] }) } as unknown as BackendPool;
        let insertedNodes = 0;
        const secondNode = (sql: string) => sql.startsWith('INSERT INTO runs') && ++insertedNodes === 2;
        await new Scheduler(failingAt(db, secondNode), pool).pass().then(() => expect.fail('the pass should have died'), () => undefined);
        expect(await db.query('SELECT id FROM instances')).to.deep.equal([]);
        expect(await db.query('SELECT id FROM runs WHERE service_id IS NOT NULL')).to.deep.equal([]);
        expect((await db.query('SELECT status FROM runs WHERE id = $1', [run!.id]))[0]!.status).to.equal('submitted');

        await new Scheduler(db, pool).pass();
        const nodes = await db.query(
          `SELECT r.replica, r.status, i.status AS instance_status FROM runs r JOIN instances i ON i.run_id = r.id WHERE r.service_id = $1 ORDER BY r.replica`, [run!.id]);
        expect(nodes).to.deep.equal([
          { replica: 0, status: 'provisioning', instance_status: 'pending' },
          { replica: 1, status: 'provisioning', instance_status: 'pending' },
        ]);
        expect((await db.query('SELECT status FROM runs WHERE id = $1', [run!.id]))[0]!.status).to.equal('provisioning');
      } finally {
        await db.close();
        await scratch?.drop();
      }
    });
  });
}

describe('a multi-node task whose instance could not be provisioned (postgres)', function () {
  this.timeout(30_000);

  it('stops the other nodes, then puts the whole task back in the queue with its nodes dropped', async () => {
    const scratch = await createScratchDatabase();
    const db = openPostgres(scratch.url);
    try {
      await migrate(db);
      const project = await upsertProject(db, 'main', [{ type: 'local' }]);
      const user = await upsertUser(db, 'admin', 'token', 'admin');
      const { fleet } = await applyFleet(db, project.id, { name: 'local', spec: {}, requirement: normalizeResources(undefined, 'fleet'), nodesMin: 0, nodesMax: 2, idleSeconds: null, backends: ['local'] });
      const run = (await insertRun(db, {
        projectId: project.id, userId: user.id, name: 'pair', kind: 'task', spec: { type: 'task', name: 'pair', nodes: 2, commands: ['true'] },
        files: [], requirement: normalizeResources(undefined, 'run'), priority: 0,
      }))!;
      await db.query(`UPDATE runs SET status = 'provisioning' WHERE id = $1`, [run.id]);
      for (const rank of [0, 1]) {
        const instance = await insertInstance(db, { projectId: project.id, fleetId: fleet.id, fleetName: 'local', backend: 'local', requirement: run.requirement, runId: `node-${rank}` });
        await insertNode(db, run.id, { id: `node-${rank}`, rank, fleetId: fleet.id, instanceId: instance.id, message: 'provisioning' });
      }
      await db.query(`UPDATE runs SET status = 'failed', termination_reason = 'provisioning_failed', status_message = 'instance local-1 could not be used', finished_at = now() WHERE id = 'node-1'`);
      const controller = new NodesController(db, 'test-owner', winston.createLogger({ silent: true }));
      const look = async () => {
        await db.query(`UPDATE runs SET next_reconcile_at = now() WHERE id = $1`, [run.id]);
        await controller.pass();
        await controller.settle();
      };

      await look();
      expect(await db.query(`SELECT id, desired FROM runs WHERE service_id = $1 ORDER BY replica`, [run.id])).to.deep.equal([
        { id: 'node-0', desired: 'stop' }, { id: 'node-1', desired: 'run' },
      ]);
      expect((await db.query('SELECT status FROM runs WHERE id = $1', [run.id]))[0]).to.deep.equal({ status: 'terminating' });

      await db.query(`UPDATE runs SET status = 'terminated', termination_reason = 'stopped_by_user', finished_at = now() WHERE id = 'node-0'`);
      await look();
      expect((await db.query('SELECT status, status_message FROM runs WHERE id = $1', [run.id]))[0]).to.deep.equal({
        status: 'submitted', status_message: 'node 1: instance local-1 could not be used; every node back in the queue',
      });
      expect(await db.query(`SELECT id FROM runs WHERE service_id = $1 AND NOT deleted`, [run.id])).to.deep.equal([]);
    } finally {
      await db.close();
      await scratch.drop();
    }
  });
});

