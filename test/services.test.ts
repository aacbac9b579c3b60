import { expect } from 'chai';
import { AgentClient } from '../agent/client.js';
import type { Instance } from '../api/objects.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';
import { applyItems, echoLlm, projectEvents, readyReplicas, runView, SERVICE_FLEET } from './helpers/services.js';

for (const kind of DATABASE_KINDS) {
  describe(`services: replicas, probes, rolling updates (${kind})`, function () {
    this.timeout(120_000);
    let server: TestServer;

    beforeEach(async () => {
      server = await startTestServer(kind, LOCAL_CONFIG);
    });
    afterEach(async () => {
      await server?.stop();
    });

    it('starts the replicas, makes them ready through their probes, and replaces one whose process dies', async () => {
      await applyItems(server.url, server.adminToken, { spec: SERVICE_FLEET }, echoLlm({ replicas: 2, scaling: undefined }));
      const running = await eventually(async () => {
        const run = await runView(server.url, server.adminToken);
        return run.status === 'running' && readyReplicas(run).length === 2 ? run : null;
      }, 60_000, 'two ready replicas');
      expect(running.service!.desiredReplicas).to.equal(2);
      expect(running.service!.path).to.equal('/proxy/services/main/echo-llm/');
      expect(running.service!.model).to.equal('echo');
      expect(running.service!.replicas.map((r) => r.replica).sort()).to.deep.equal([0, 1]);

      const [{ id, agent_url: agentUrl, agent_token: agentToken }] = await server.db.query(
        `SELECT r.id, i.agent_url, i.agent_token FROM runs r JOIN instances i ON i.id = r.instance_id WHERE r.service_id IS NOT NULL AND r.replica = 0`);
      await new AgentClient(agentUrl, agentToken).stop(id, { abort: true });
      await eventually(async () => {
        const rows = await server.db.query(`SELECT replica, status FROM runs WHERE service_id IS NOT NULL ORDER BY submitted_at`);
        return rows.length === 3 && ['failed', 'terminated'].includes(rows[0].status) ? rows : null;
      }, 30_000, 'the dead replica to end');
      const healed = await eventually(async () => {
        const run = await runView(server.url, server.adminToken);
        return readyReplicas(run).length === 2 ? run : null;
      }, 60_000, 'a replacement replica');
      expect(healed.status).to.equal('running');
      const events = await projectEvents(server.url, server.adminToken);
      expect(events.map((e) => e.reason)).to.include.members(['ReplicaAdded', 'ReplicaReady']);
    });

    it('rolls a new generation out one replica at a time and changes the replica count in place', async () => {
      await applyItems(server.url, server.adminToken, { spec: SERVICE_FLEET }, echoLlm({ replicas: 2, scaling: undefined }));
      await eventually(async () => readyReplicas(await runView(server.url, server.adminToken)).length === 2, 60_000, 'generation 1 ready');
      const before = await server.db.query(`SELECT id FROM runs WHERE service_id IS NOT NULL`);

      await applyItems(server.url, server.adminToken, echoLlm({ replicas: 3, scaling: undefined }));
      const scaled = await eventually(async () => {
        const run = await runView(server.url, server.adminToken);
        return readyReplicas(run).length === 3 ? run : null;
      }, 60_000, 'a third replica');
      expect(scaled.generation).to.equal(1);
      const kept = await server.db.query(`SELECT id FROM runs WHERE id = ANY($1::text[]) AND status = 'running'`, [before.map((r) => r.id)]);
      expect(kept).to.have.length(2);

      await applyItems(server.url, server.adminToken, echoLlm({ replicas: 3, scaling: undefined, env: { MODEL: 'echo', TOKEN_DELAY_MS: '5' } }));
      const rolled = await eventually(async () => {
        const run = await runView(server.url, server.adminToken);
        const ready = run.service!.replicas.filter((r) => r.state === 'ready');
        return ready.length === 3 && ready.every((r) => r.generation === 2) && run.service!.replicas.length === 3 ? run : null;
      }, 90_000, 'generation 2 everywhere');
      expect(rolled.generation).to.equal(2);
      // The order the replicas' own timestamps tell: a new replica is added once the one before it is ready and an old
      // one has left the rotation for it, and an old one leaves only once a new one is ready, so 3 serve throughout.
      const replicas = await server.db.query(`SELECT generation, submitted_at, ready_at, draining_since FROM runs WHERE service_id IS NOT NULL ORDER BY submitted_at`);
      const added = replicas.filter((r) => r.generation === 2);
      const replaced = replicas.filter((r) => r.generation === 1 && r.draining_since).sort((a, b) => a.draining_since - b.draining_since);
      expect([added.length, replaced.length]).to.deep.equal([3, 3]);
      const steps: [string, Date][] = added.flatMap((replica, i) => [
        [`new replica ${i + 1} added`, replica.submitted_at], [`new replica ${i + 1} ready`, replica.ready_at], [`old replica ${i + 1} draining`, replaced[i].draining_since],
      ]);
      const happened = [...steps].sort((a, b) => new Date(a[1]).getTime() - new Date(b[1]).getTime());
      expect(happened.map(([step]) => step)).to.deep.equal(steps.map(([step]) => step));
    });

    it('ends a service whose replicas never become ready with the reason', async () => {
      await applyItems(server.url, server.adminToken, { spec: SERVICE_FLEET }, echoLlm({ replicas: 1, scaling: undefined, commands: ['echo "no model here" >&2; exit 3'] }));
      const failed = await eventually(async () => {
        const run = await runView(server.url, server.adminToken);
        return run.status === 'failed' ? run : null;
      }, 60_000, 'the service to fail');
      expect(failed.statusMessage).to.match(/3 replicas in a row ended before becoming ready; the last, replica 0: exited with code 3/);
      const logs = await server.api('GET', '/api/projects/main/runs/echo-llm/logs');
      expect(logs.status).to.equal(200);
      expect(logs.body.lines.map((l: { text: string }) => l.text)).to.deep.equal(['no model here']);
      expect((await server.api('GET', '/api/projects/main/runs/echo-llm/logs?replica=0')).status).to.equal(200);
      expect((await server.api('GET', '/api/projects/main/runs/echo-llm/logs?replica=7')).status).to.equal(404);
      expect((await server.api('GET', '/api/projects/main/runs/echo-llm/logs?replica=x')).status).to.equal(400);
    });

    it('drains and stops every replica on stop, and gives the instances back', async () => {
      await applyItems(server.url, server.adminToken, { spec: SERVICE_FLEET }, echoLlm({ replicas: 2, scaling: undefined }));
      const serving = await eventually(async () => {
        const run = await runView(server.url, server.adminToken);
        return readyReplicas(run).length === 2 ? run : null;
      }, 60_000, 'two ready replicas');
      const used = serving.service!.replicas.map((r) => r.instance!).sort();
      expect((await server.api('POST', '/api/projects/main/runs/echo-llm/stop', {})).status).to.equal(202);
      const stopped = await eventually(async () => {
        const run = await runView(server.url, server.adminToken);
        return run.status === 'terminated' ? run : null;
      }, 30_000, 'the service to stop');
      expect(stopped.terminationReason).to.equal('stopped_by_user');
      // The replicas' two instances stay in the fleet (idle_duration 10m), free for the next run.
      const instances: Instance[] = (await server.api('GET', '/api/projects/main/instances')).body;
      const after = instances.filter((i) => used.includes(i.name)).map((i) => [i.name, i.status, i.run]).sort();
      expect(after).to.deep.equal(used.map((name) => [name, 'idle', null]));
    });
  });
}
