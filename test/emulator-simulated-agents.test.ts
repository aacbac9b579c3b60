import { expect } from 'chai';
import { connect } from 'node:net';
import { KEEP_ALIVE_TIMEOUT_MS } from '../api/keep-alive.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import type { GpucloudInstance } from '../backends/gpucloud/api.js';
import { DEFAULT_SIMULATED_TIMINGS, SimulatedAgents } from '../backends/gpucloud/simulated-agents.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';
import { readyReplicas } from './helpers/services.js';

const FLEET = { spec: { type: 'fleet', name: 'cloud', backends: ['gpucloud'], nodes: '0..3', idle_duration: '1m', resources: { gpu: '24GB..' } } };

for (const kind of DATABASE_KINDS) {
  describe(`gpucloud emulator with simulated agents, through the server (${kind})`, function () {
    this.timeout(90_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    const run = async (name: string) => (await server.api('GET', `/api/projects/main/runs/${name}`)).body;
    const lines = async (name: string): Promise<string[]> =>
      (await server.api('GET', `/api/projects/main/runs/${name}/logs`)).body.lines.map((line: { text: string }) => line.text);

    before(async () => {
      emulator = await startEmulator({ port: 0, bootDelayMs: 100, agents: 'simulated', capacity: { L4: 3 } });
      server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey));
      expect((await server.api('POST', '/api/projects/main/fleets/apply', FLEET)).status).to.equal(201);
    });
    after(async () => {
      await server?.stop();
      await emulator?.close();
    });

    it('runs a task printing a line a second: its lines arrive while it runs, and it ends done', async () => {
      const commands = ['echo "starting $ORCHESTRATOR_RUN_NAME"', 'for i in $(seq 1 3); do echo "line $i"; sleep 1; done'];
      expect((await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'ticker', commands } })).status).to.equal(201);
      await eventually(async () => {
        const current = await run('ticker');
        return current.status === 'running' && (await lines('ticker')).includes('line 1') ? current : null;
      }, 30_000, 'the first line while the task runs');
      const done = await eventually(async () => {
        const current = await run('ticker');
        return ['done', 'failed', 'terminated'].includes(current.status) ? current : null;
      }, 30_000, 'the task to finish');
      expect(done).to.include({ status: 'done', exitCode: 0, terminationReason: 'done_by_user_code' });
      expect(await lines('ticker')).to.deep.equal(['starting ticker', 'line 1', 'line 2', 'line 3']);

      const state = await (await fetch(`${emulator.url}/_emulator/state`, { headers: { authorization: `Bearer ${emulator.apiKey}` } })).json() as
        { instances: Array<GpucloudInstance & { agent_pid: number | null }> };
      const running = state.instances.filter((instance) => instance.status === 'running');
      expect(running).to.not.be.empty;
      for (const instance of running) {
        expect(instance.agent_pid, 'no agent process').to.equal(null);
        expect(new URL(instance.agent_url!).pathname).to.equal(`/instances/${instance.id}`);
      }
    });

    it('ends a failing task with its exit code, and stops one that runs until stopped', async () => {
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'three', commands: ['echo before', 'exit 3', 'echo never'] } });
      await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'forever', commands: ['while true; do echo tick; sleep 1; done'] } });
      const failed = await eventually(async () => {
        const current = await run('three');
        return current.status === 'failed' ? current : null;
      }, 30_000, 'the failing task to end');
      expect(failed).to.include({ exitCode: 3, terminationReason: 'failed_by_user_code' });
      expect(await lines('three')).to.deep.equal(['before']);

      await eventually(async () => (await lines('forever')).length >= 2, 30_000, 'two ticks');
      const history = await server.api('GET', '/api/projects/main/runs/forever/metrics/history');
      expect(history.status).to.equal(200);
      expect(history.body, 'a sample from the start of the job, as the agent keeps them').to.not.be.empty;
      expect(history.body[0].gpus.map((gpu: { name: string }) => gpu.name)).to.include('L4');

      const [{ instance_id: instanceId, agent_url: agentUrl }] = await server.db.query<{ instance_id: string; agent_url: string }>(
        `SELECT r.instance_id, i.agent_url FROM runs r JOIN instances i ON i.id = r.instance_id WHERE r.name = 'forever'`);
      await server.db.query(`UPDATE instances SET agent_url = 'http://127.0.0.1:9' WHERE id = $1`, [instanceId]);
      const unanswered = await server.api('GET', '/api/projects/main/runs/forever/metrics');
      await server.db.query('UPDATE instances SET agent_url = $1 WHERE id = $2', [agentUrl, instanceId]);
      expect([unanswered.status, unanswered.body.error.code], 'an agent that does not answer is the gateway\'s fault, not the server\'s').to.deep.equal([502, 'agent_unreachable']);
      expect((await server.api('POST', '/api/projects/main/runs/forever/stop', {})).status).to.equal(202);
      const stopped = await eventually(async () => {
        const current = await run('forever');
        return ['done', 'failed', 'terminated'].includes(current.status) ? current : null;
      }, 30_000, 'the stopped task to end');
      expect(stopped).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
    });

    it('makes a service ready through its probe, and the service proxy reaches its simulated server', async () => {
      const service = { type: 'service', name: 'web', port: 8000, commands: ['python3 -m http.server $PORT'], probes: [{ type: 'http', url: '/health', interval: '1s' }] };
      expect((await server.api('POST', '/api/projects/main/runs/apply', { spec: service })).status).to.equal(201);
      await eventually(async () => {
        const current = await run('web');
        return current.status === 'running' && readyReplicas(current).length === 1 ? current : null;
      }, 30_000, 'one ready replica');
      const answer = await fetch(`${server.url}/proxy/services/main/web/hello?x=1`, { headers: { authorization: `Bearer ${server.adminToken}` } });
      expect(answer.status).to.equal(200);
      expect(await answer.json()).to.include({ simulated: true, port: 8000, path: '/hello' });
      await server.api('POST', '/api/projects/main/runs/web/stop', {});
    });
  });
}

describe('simulated agents', () => {
  it('each listen on a port of their own and hold idle connections as long, as real agents do, and one that stopped refuses connections', async () => {
    const agents = await SimulatedAgents.start({ host: '127.0.0.1', timings: DEFAULT_SIMULATED_TIMINGS, maxLogLines: 10, gpuUtilization: () => null });
    try {
      const machine = (instanceId: string) => ({ instanceId, token: `token-${instanceId}`, gpu: { name: 'L4', memoryMib: 24_576, count: 1 }, memoryMib: 65_536 });
      const [first, second] = await Promise.all([agents.launch(machine('i-1')), agents.launch(machine('i-2'))]);
      const health = async (url: string, token: string) => (await fetch(`${url}/api/health`, { headers: { authorization: `Bearer ${token}` } })).json();
      expect(new URL(first!.url).port).to.not.equal(new URL(second!.url).port);
      const held = await fetch(`${first!.url}/api/health`, { headers: { authorization: 'Bearer token-i-1' } });
      await held.arrayBuffer();
      expect(held.headers.get('keep-alive')).to.equal(`timeout=${KEEP_ALIVE_TIMEOUT_MS / 1000}`);
      expect(await health(first!.url, 'token-i-1')).to.include({ ok: true, instanceId: 'i-1' });
      expect(await health(second!.url, 'token-i-2')).to.include({ ok: true, instanceId: 'i-2' });

      await first!.agent.stop(0);
      const refused = await new Promise<string | undefined>((resolve) => {
        const socket = connect(Number(new URL(first!.url).port), '127.0.0.1', () => { socket.destroy(); resolve('connected'); });
        socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code));
      });
      expect(refused).to.equal('ECONNREFUSED');
      expect(await health(second!.url, 'token-i-2')).to.include({ ok: true, instanceId: 'i-2' });
    } finally {
      await agents.close();
    }
  });
});
