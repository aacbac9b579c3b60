import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { AgentClient } from '../agent/client.js';
import { dockerClient } from '../agent/docker-connection.js';
import { LABELS } from '../agent/docker-runtime.js';
import { removeInstanceContainers } from '../agent/instance-containers.js';
import { orchestratorCommand, startAgentProcess, type AgentLaunch } from '../agent/launch.js';
import { LocalInstanceState, type LocalInstanceRecord } from '../backends/local/state.js';
import { randomToken, submission, waitForState } from './helpers/agent-jobs.js';
import { CLI_MAIN } from './helpers/cli.js';
import { ensurePodman, TEST_IMAGE } from './helpers/podman.js';
import { eventually, LOCAL_CONFIG } from './helpers/server.js';

const ADMIN_TOKEN = 'test-admin-token';

/** Whether the process exists and is not a zombie (a reparented zombie may wait long for its reaper). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Living processes of the process group `pgid`: a job and everything it started. */
function groupMembers(pgid: number): number[] {
  return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).map(Number).filter((pid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return fields[0] !== 'Z' && Number(fields[2]) === pgid;
    } catch {
      return false;
    }
  });
}

function exitOf(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

/** Resolves with the exit code, or fails when the process still runs after `timeoutMs`. */
async function exitWithin(child: ChildProcess, timeoutMs: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`process ${child.pid} still running after ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([exitOf(child), late]);
  } finally {
    clearTimeout(timer);
  }
}

async function readPid(file: string): Promise<number> {
  return eventually(async () => existsSync(file) && Number(readFileSync(file, 'utf8').trim()), 30_000, `${file} to be written`);
}

describe('agent lifetime without a server', function () {
  this.timeout(90_000);
  let scratch: string;
  const leftovers: number[] = [];

  before(() => {
    scratch = mkdtempSync(join(tmpdir(), 'agent-lifetime-'));
  });

  after(() => {
    for (const pid of leftovers) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        if (alive(pid)) process.kill(pid, 'SIGKILL');
      }
    }
    rmSync(scratch, { recursive: true, force: true });
  });

  const agent = async (name: string, launch: Partial<AgentLaunch> = {}) => {
    const token = randomToken();
    const workDir = join(scratch, name);
    const { child, url } = await startAgentProcess({ token, instanceId: name, runtime: 'process', workDir, ...launch });
    leftovers.push(child.pid!);
    return { child, client: new AgentClient(url, token), workDir };
  };

  it('ends a local agent and its task once the server is killed and its folder removed', async () => {
    const dir = join(scratch, 'server');
    mkdirSync(dir);
    writeFileSync(join(dir, 'config.yml'), LOCAL_CONFIG);
    const server = spawn(process.execPath, [CLI_MAIN, 'server', '--port', '0'], {
      env: { ...process.env, ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_SERVER_ADMIN_TOKEN: ADMIN_TOKEN, ORCHESTRATOR_DATABASE_URL: '', ORCHESTRATOR_LOG_LEVEL: 'error' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    leftovers.push(server.pid!);
    let stdout = '';
    server.stdout!.on('data', (chunk: Buffer) => { stdout += chunk.toString(); });
    const url = await eventually(async () => /Server URL: +(\S+)/.exec(stdout)?.[1], 60_000, 'the server to print its URL');
    const api = async (path: string, body: unknown) => {
      const response = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(response.status, await response.clone().text()).to.be.within(200, 299);
    };
    const pidFile = join(scratch, 'task.pid');
    await api('/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } });
    await api('/api/projects/main/runs/apply', { spec: { type: 'task', name: 'sleeper', commands: [`echo $$ > ${pidFile}`, 'sleep 600'] } });
    const taskGroup = await readPid(pidFile);
    const [record] = await new LocalInstanceState(join(dir, 'backends', 'local')).readAll() as [LocalInstanceRecord];
    leftovers.push(record.pid, taskGroup);
    expect(alive(record.pid)).to.equal(true);
    expect(groupMembers(taskGroup)).to.not.be.empty;

    server.kill('SIGKILL');
    await exitOf(server);
    rmSync(dir, { recursive: true, force: true });

    await eventually(async () => !alive(record.pid) && groupMembers(taskGroup).length === 0, 8000, 'the agent and its task to end');
  });

  it('ends an agent without jobs once no server has called for the orphan timeout, saying why', async () => {
    const { child, workDir } = await agent('idle', { orphanTimeoutSeconds: 2 });
    await sleep(1000);
    expect(child.exitCode, 'exited before the orphan timeout').to.equal(null);
    expect(await exitWithin(child, 10_000)).to.equal(0);
    expect(readFileSync(join(workDir, 'agent.log'), 'utf8')).to.match(/"agent ending itself".*no server has called for \d+ s \(orphan timeout 2 s\)/);
  });

  it('keeps a running job past the orphan timeout and ends once it has finished', async () => {
    const { child, client } = await agent('busy', { orphanTimeoutSeconds: 1 });
    const pidFile = join(scratch, 'busy-job.pid');
    const doneFile = join(scratch, 'busy-job.done');
    await client.submit(submission({ commands: [`echo $$ > ${pidFile}`, 'sleep 4', `touch ${doneFile}`] }));
    const jobGroup = await readPid(pidFile);
    await sleep(2500);
    expect(child.exitCode, 'ended while its job ran').to.equal(null);
    expect(groupMembers(jobGroup)).to.not.be.empty;
    expect(existsSync(doneFile)).to.equal(false);

    expect(await exitWithin(child, 15_000)).to.equal(0);
    expect(existsSync(doneFile), 'the job was cut short').to.equal(true);
  });

  it('starts the orphan timeout again at every request, and never ends with the timeout off', async () => {
    const unbounded = await agent('unbounded', { orphanTimeoutSeconds: 0 });
    const watched = await agent('pinged', { orphanTimeoutSeconds: 3 });
    for (let elapsed = 0; elapsed < 7000; elapsed += 500) {
      await watched.client.health();
      await sleep(500);
    }
    expect(watched.child.exitCode, 'ended although a server kept calling').to.equal(null);
    expect(await exitWithin(watched.child, 10_000)).to.equal(0);
    expect(unbounded.child.exitCode).to.equal(null);
    unbounded.child.kill('SIGTERM');
    expect(await exitOf(unbounded.child)).to.equal(0);
  });

  it('refuses an orphan timeout it cannot read, and a folder to watch that does not exist', async () => {
    const { command, args } = orchestratorCommand();
    const refusal = async (flags: string[]) => {
      const child = spawn(command, [...args, 'agent', '--runtime', 'process', ...flags], {
        env: { ...process.env, ORCHESTRATOR_AGENT_TOKEN: randomToken() }, stdio: ['ignore', 'ignore', 'pipe'],
      });
      let stderr = '';
      child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
      expect(await exitOf(child)).to.equal(2);
      return stderr;
    };
    expect(await refusal(['--orphan-timeout', 'soon'])).to.include('--orphan-timeout: invalid duration "soon"');
    const missing = join(scratch, 'never-made');
    expect(await refusal(['--exit-when-missing', missing])).to.include(`cannot watch ${missing}: it is not a directory`);
  });

  describe('with containers', () => {
    let dockerHost: string;
    const instanceId = `lifetime-${randomUUID().slice(0, 8)}`;

    before(async function () {
      this.timeout(600_000);
      dockerHost = await ensurePodman();
    });

    after(async () => {
      if (dockerHost) await removeInstanceContainers(instanceId, dockerHost);
    });

    it('stops and removes its containers and exits once its folder is removed', async () => {
      const workDir = join(scratch, 'docker-instance');
      mkdirSync(workDir);
      const token = randomToken();
      const { child, url } = await startAgentProcess({
        token, instanceId, runtime: 'docker', workDir, exitWhenMissing: workDir, env: { DOCKER_HOST: dockerHost },
      });
      leftovers.push(child.pid!);
      const client = new AgentClient(url, token);
      const job = submission({ image: TEST_IMAGE, commands: ['sleep 600'] });
      await client.submit(job);
      await waitForState(client, job.jobId, ['running'], 30_000);
      const containers = () => dockerClient(dockerHost).listContainers({ all: true, filters: { label: [`${LABELS.instanceId}=${instanceId}`] } });
      expect(await containers()).to.have.length(1);

      rmSync(workDir, { recursive: true, force: true });
      expect(await exitWithin(child, 15_000)).to.equal(0);
      expect(await containers()).to.deep.equal([]);
    });
  });
});
