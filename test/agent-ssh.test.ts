import { expect } from 'chai';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { AGENT_FORWARD_AUTH_HEADER, SSH_AUTHORIZED_KEYS_HEADER, type JobSubmission } from '../api/agent.js';
import { AgentClient } from '../agent/client.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { HOST_KEY_FILE, loadOrCreateHostKey } from '../agent/ssh/host-key.js';
import { base64, randomToken, submission, waitForLine, waitForState } from './helpers/agent-jobs.js';
import { ensurePodman, ensureStandInImage, removeStandInImage, startPodmanAgent, TEST_IMAGE, UV_VENV_STAND_IN, type PodmanAgent } from './helpers/podman.js';
import { freePort } from './helpers/ports.js';
import { processesWith } from './helpers/processes.js';
import { eventually } from './helpers/server.js';

const PROXY = fileURLToPath(new URL('./fixtures/ssh-proxy.mjs', import.meta.url));
const HOST_ALIAS = 'agent-ssh-test';
/** A stand-in of the default image, whose uv makes the job's virtual environment. */
const VENV_IMAGE = 'localhost/orchestrator-test:venv';

interface Finished {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(command: string, args: string[], input?: string): Promise<Finished> {
  return new Promise((resolve) => {
    const child = execFile(command, args, { timeout: 20_000, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr });
    });
    child.stdin!.on('error', () => undefined).end(input ?? '');
  });
}

/** A key pair, an ssh config whose ProxyCommand reaches one job through the agent, and known_hosts pinning the agent's key. */
class SshClientSetup {
  readonly dir = mkdtempSync(join(tmpdir(), 'agent-ssh-client-'));
  readonly key = join(this.dir, 'id_ed25519');
  readonly otherKey = join(this.dir, 'other_ed25519');
  readonly knownHosts = join(this.dir, 'known_hosts');

  constructor(private readonly agentUrl: string, private readonly token: string) {}

  async init(hostKey: string): Promise<void> {
    for (const file of [this.key, this.otherKey]) {
      const made = await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', 'tester', '-f', file]);
      expect(made.code, made.stderr).to.equal(0);
    }
    writeFileSync(this.knownHosts, `${HOST_ALIAS} ${hostKey}\n`);
  }

  /** The ssh config for `jobId`, offering `identity` and accepting only `authorized` keys at the agent. */
  config(jobId: string, identity = this.key, authorized = [`${this.key}.pub`]): string {
    const headersFile = join(this.dir, `headers-${jobId}.json`);
    writeFileSync(headersFile, JSON.stringify({
      [AGENT_FORWARD_AUTH_HEADER]: `Bearer ${this.token}`,
      [SSH_AUTHORIZED_KEYS_HEADER]: base64(authorized.map((file) => readFileSync(file, 'utf8')).join('')),
    }));
    const file = join(this.dir, `config-${jobId}-${Math.random().toString(36).slice(2)}`);
    writeFileSync(file, [
      'Host job',
      '  User somebody',
      `  IdentityFile ${identity}`,
      '  IdentitiesOnly yes',
      `  ProxyCommand ${process.execPath} ${PROXY} ${this.agentUrl.replace(/^http/, 'ws')}/api/jobs/${jobId}/ssh ${headersFile}`,
      `  HostKeyAlias ${HOST_ALIAS}`,
      `  UserKnownHostsFile ${this.knownHosts}`,
      '  GlobalKnownHostsFile /dev/null',
      '  StrictHostKeyChecking yes',
      '  BatchMode yes',
      '  LogLevel ERROR',
      '',
    ].join('\n'));
    return file;
  }

  ssh(config: string, args: string[], input?: string): Promise<Finished> {
    return run('ssh', ['-F', config, ...args], input);
  }

  scp(config: string, from: string, to: string): Promise<Finished> {
    return run('scp', ['-F', config, from, to]);
  }

  /** `ssh -N -L <local port>:<host>:<port>` in the background; `stderr()` is what it printed so far. */
  async tunnel(config: string, jobPort: number, host = 'localhost'): Promise<{ localPort: number; child: ChildProcess; stderr(): string }> {
    const localPort = await freePort();
    const child = spawn('ssh', ['-F', config, '-N', '-o', 'ExitOnForwardFailure yes', '-o', 'LogLevel INFO', '-L', `${localPort}:${host}:${jobPort}`, 'job'], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk; });
    return { localPort, child, stderr: () => stderr };
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

async function fetchThrough(localPort: number): Promise<string> {
  return eventually(async () => {
    const response = await fetch(`http://127.0.0.1:${localPort}/`);
    return response.text();
  }, 10_000);
}

function stopped(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** The status a WebSocket upgrade to the job's SSH route was refused with, and its error code. */
function upgradeRefusal(url: string, headers: Record<string, string>): Promise<{ status: number; code?: string }> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, { headers });
    socket.once('open', () => {
      socket.close();
      resolve({ status: 101 });
    });
    socket.once('unexpected-response', (_req, res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => { body += chunk; }).on('end', () => {
        resolve({ status: res.statusCode!, code: (JSON.parse(body) as { error: { code: string } }).error.code });
      });
    });
    socket.once('error', reject);
  });
}

/** The cases both runtimes must pass, on a sleeping job and a job serving HTTP on `httpPort`. */
function sshCases(context: () => { client: AgentClient; setup: SshClientSetup; sleeper: JobSubmission; server: JobSubmission; httpPort: number; workingDir: string }) {
  it('runs a command in the job with its environment and working directory, stdout and stderr apart', async () => {
    const { setup, sleeper, workingDir } = context();
    const result = await setup.ssh(setup.config(sleeper.jobId), ['job', 'echo $ORCHESTRATOR_RUN_NAME; pwd; echo oops >&2']);
    expect(result.code, result.stderr).to.equal(0);
    expect(result.stdout).to.equal(`${sleeper.runName}\n${workingDir}\n`);
    expect(result.stderr).to.equal('oops\n');
  });

  it('passes the exit status through, and stdin up to its end', async () => {
    const { setup, sleeper } = context();
    const config = setup.config(sleeper.jobId);
    expect((await setup.ssh(config, ['job', 'exit 7'])).code).to.equal(7);
    const echoed = await setup.ssh(config, ['job', 'cat; echo end'], 'line one\nline two\n');
    expect(echoed.stdout).to.equal('line one\nline two\nend\n');
  });

  it('gives a pseudo-terminal when asked', async () => {
    const { setup, sleeper } = context();
    const result = await setup.ssh(setup.config(sleeper.jobId), ['-tt', 'job', 'tty; echo cols=$(stty size)']);
    expect(result.code, result.stderr).to.equal(0);
    expect(result.stdout).to.match(/^\/dev\/pts\/\d+\r?\n/);
  });

  it('copies files in and out with scp, byte for byte, relative to the working directory', async () => {
    const { setup, sleeper, workingDir } = context();
    const config = setup.config(sleeper.jobId);
    const original = join(setup.dir, 'original.bin');
    const back = join(setup.dir, 'back.bin');
    writeFileSync(original, randomBytes(300_000));
    const sent = await setup.scp(config, original, 'job:uploaded.bin');
    expect(sent.code, sent.stderr + sent.stdout).to.equal(0);
    const listed = await setup.ssh(config, ['job', `wc -c < ${workingDir}/uploaded.bin`]);
    expect(listed.stdout.trim()).to.equal('300000');
    const fetched = await setup.scp(config, 'job:uploaded.bin', back);
    expect(fetched.code, fetched.stderr).to.equal(0);
    expect(readFileSync(back).equals(readFileSync(original))).to.equal(true);
  });

  it('serves sftp: listing, a new directory, a rename, a removal', async () => {
    const { setup, sleeper, workingDir } = context();
    const config = setup.config(sleeper.jobId);
    const local = join(setup.dir, 'listed.txt');
    writeFileSync(local, 'listed\n');
    const batch = join(setup.dir, 'batch');
    writeFileSync(batch, ['pwd', `put ${local} listed.txt`, 'mkdir sub', 'rename listed.txt sub/moved.txt', 'ls sub', 'rm sub/moved.txt', 'rmdir sub', ''].join('\n'));
    const result = await run('sftp', ['-F', config, '-b', batch, 'job']);
    expect(result.code, result.stderr).to.equal(0);
    expect(result.stdout).to.contain(`Remote working directory: ${workingDir}`);
    expect(result.stdout).to.match(/sub\/moved\.txt/);
    expect((await setup.ssh(config, ['job', 'ls -A'])).stdout).to.not.contain('sub');
  });

  it('forwards a local port to the job\'s port with ssh -L, and counts the connection in the job\'s status', async () => {
    const { client, setup, server, httpPort } = context();
    const { localPort, child } = await setup.tunnel(setup.config(server.jobId), httpPort);
    try {
      expect(await fetchThrough(localPort)).to.contain('hello from the job');
      const status = await client.job(server.jobId);
      expect(status.sshConnections).to.equal(1);
      expect(Date.parse(status.lastSshActivityAt!)).to.be.closeTo(Date.now(), 10_000);
    } finally {
      await stopped(child);
    }
    await eventually(async () => expect((await client.job(server.jobId)).sshConnections).to.equal(0), 5000);
  });

  it('refuses a key the caller did not list, and ssh refuses an agent whose host key changed', async () => {
    const { setup, sleeper } = context();
    const wrongKey = await setup.ssh(setup.config(sleeper.jobId, setup.otherKey), ['job', 'true']);
    expect(wrongKey.code).to.equal(255);
    expect(wrongKey.stderr).to.contain('Permission denied (publickey)');

    const pinned = readFileSync(setup.knownHosts, 'utf8');
    writeFileSync(setup.knownHosts, `${HOST_ALIAS} ${readFileSync(`${setup.otherKey}.pub`, 'utf8').split(' ').slice(0, 2).join(' ')}\n`);
    try {
      const changed = await setup.ssh(setup.config(sleeper.jobId), ['job', 'true']);
      expect(changed.code).to.equal(255);
      expect(changed.stderr).to.match(/REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed/);
    } finally {
      writeFileSync(setup.knownHosts, pinned);
    }
  });

  it('keeps what a finished command left running in the background, as sshd does', async () => {
    const { setup, sleeper } = context();
    const config = setup.config(sleeper.jobId);
    const started = await setup.ssh(config, ['job', '(sleep 2; echo survived > survivor.txt) > /dev/null 2>&1 &']);
    expect(started.code, started.stderr).to.equal(0);
    const read = await eventually(async () => {
      const result = await setup.ssh(config, ['job', 'cat survivor.txt']);
      return result.code === 0 ? result.stdout : null;
    }, 15_000, 'the background process to write its file');
    expect(read).to.equal('survived\n');
  });

  it('ends with the job what an SSH session started to outlive it: setsid and a double fork alike', async () => {
    const { client, setup, sleeper } = context();
    const job = { ...sleeper, jobId: `${sleeper.jobId}-left`, runName: `${sleeper.runName}-left` };
    await client.submit(job);
    await waitForState(client, job.jobId, ['running'], 30_000);
    const probe = `LEFT_PROBE=${randomBytes(8).toString('hex')}`;
    const started = await setup.ssh(setup.config(job.jobId), ['job', `(${probe} sleep 300 > /dev/null 2>&1 < /dev/null &); ${probe} setsid sleep 301 > /dev/null 2>&1 < /dev/null &`]);
    expect(started.code, started.stderr).to.equal(0);
    await eventually(async () => processesWith(probe).length === 2, 10_000, 'both processes to run');
    await new Promise((done) => setTimeout(done, 2500));
    expect(processesWith(probe), 'the processes to outlive their session').to.have.length(2);
    await client.stop(job.jobId, { graceSeconds: 1 });
    await waitForState(client, job.jobId, ['stopped'], 30_000);
    await eventually(async () => processesWith(probe).length === 0, 10_000, 'no process of the job to be left');
  });

  it('refuses ssh -L to a port of the job where nothing listens at once, with the reason', async () => {
    const { setup, sleeper } = context();
    const { localPort, child, stderr } = await setup.tunnel(setup.config(sleeper.jobId), await freePort());
    try {
      await eventually(async () => {
        await fetch(`http://127.0.0.1:${localPort}/`, { signal: AbortSignal.timeout(5000) }).catch(() => undefined);
        return stderr().includes('nothing answers on port');
      }, 15_000, 'ssh to print the reason');
      const refused = await fetch(`http://127.0.0.1:${localPort}/`, { signal: AbortSignal.timeout(5000) }).then(() => 'answered', (error: Error) => error.name);
      expect(refused, 'a refusal, not a connection left hanging').to.equal('TypeError');
    } finally {
      await stopped(child);
    }
  });
}

describe('agent SSH (process runtime)', function () {
  this.timeout(60_000);
  let scratch: string;
  let token: string;
  let agent: RunningAgent;
  let client: AgentClient;
  let setup: SshClientSetup;
  let sleeper: JobSubmission;
  let server: JobSubmission;
  let httpPort: number;

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'agent-ssh-'));
    token = randomToken();
    agent = await startAgent({ token, runtime: 'process', instanceId: 'ssh-test', workDir: join(scratch, 'agent') });
    client = new AgentClient(agent.url, token);
    setup = new SshClientSetup(agent.url, token);
    await setup.init((await client.health()).sshHostKey!);
    httpPort = await freePort();
    sleeper = submission({ runName: 'ssh-sleeper', commands: ['sleep 600'] });
    server = submission({
      runName: 'ssh-server',
      commands: ['node server.cjs'],
      files: [{ path: 'server.cjs', contentBase64: base64(`require('node:http').createServer((req, res) => res.end('hello from the job')).listen(${httpPort}, '127.0.0.1', () => console.log('ready'));`) }],
      ports: [httpPort],
    });
    await client.submit(sleeper);
    await client.submit(server);
    await waitForState(client, sleeper.jobId, ['running']);
    await waitForLine(client, server.jobId, 'ready');
  });

  after(async () => {
    await agent?.close();
    setup?.remove();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  sshCases(() => ({ client, setup, sleeper, server, httpPort, workingDir: join(agent.workDir, 'jobs', sleeper.jobId, 'work') }));

  it('keeps its host key (mode 0600) across a restart and reports it in health', async () => {
    const { sshHostKey } = await client.health();
    expect(sshHostKey).to.match(/^ssh-ed25519 AAAA[0-9A-Za-z+/=]+$/);
    expect(statSync(join(agent.workDir, HOST_KEY_FILE)).mode & 0o777).to.equal(0o600);
    const again = await startAgent({ token, runtime: 'process', instanceId: 'ssh-test-again', workDir: agent.workDir, port: 0 });
    try {
      expect((await new AgentClient(again.url, token).health()).sshHostKey).to.equal(sshHostKey);
    } finally {
      await again.close();
    }
  });

  it('starts with a host key it can read back on every new instance, including keys whose public half starts with a zero byte', () => {
    const dir = mkdtempSync(join(tmpdir(), 'host-keys-'));
    try {
      for (let i = 0; i < 2000; i++) {
        const workDir = join(dir, String(i));
        mkdirSync(workDir);
        expect(loadOrCreateHostKey(workDir).publicKey).to.match(/^ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI[0-9A-Za-z+/]{43}=?$/);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses the upgrade without the token (401), without keys (400) and for a job not running (409)', async () => {
    const url = `${agent.url.replace(/^http/, 'ws')}/api/jobs/${sleeper.jobId}/ssh`;
    const keys = base64(readFileSync(`${setup.key}.pub`, 'utf8'));
    expect(await upgradeRefusal(url, { [SSH_AUTHORIZED_KEYS_HEADER]: keys })).to.deep.equal({ status: 401, code: 'unauthorized' });
    expect(await upgradeRefusal(url, { authorization: `Bearer ${token}` })).to.deep.equal({ status: 400, code: 'no_authorized_keys' });
    const finished = submission({ commands: ['true'] });
    await client.submit(finished);
    await waitForState(client, finished.jobId, ['exited']);
    expect(await upgradeRefusal(url.replace(sleeper.jobId, finished.jobId), { authorization: `Bearer ${token}`, [SSH_AUTHORIZED_KEYS_HEADER]: keys }))
      .to.deep.equal({ status: 409, code: 'job_not_running' });
  });

  it('ends an open session when its job stops', async () => {
    const short = submission({ runName: 'ssh-short', commands: ['sleep 600'] });
    await client.submit(short);
    await waitForState(client, short.jobId, ['running']);
    const session = spawn('ssh', ['-F', setup.config(short.jobId), 'job', 'echo started; sleep 60'], { stdio: ['ignore', 'pipe', 'ignore'] });
    const exited = new Promise<number | null>((resolve) => session.once('exit', resolve));
    await new Promise((resolve) => session.stdout!.once('data', resolve));
    await client.stop(short.jobId, { abort: true });
    expect(await exited).to.equal(255);
    await eventually(async () => (await client.job(short.jobId)).sshConnections === 0, 5000);
  });

  it('refuses remote forwarding (ssh -R)', async () => {
    const result = await setup.ssh(setup.config(sleeper.jobId), ['-o', 'ExitOnForwardFailure yes', '-R', '0:localhost:80', 'job', 'true']);
    expect(result.code).to.equal(255);
    expect(result.stderr).to.contain('remote port forwarding failed');
  });

  it('refuses ssh -L to another host, with the reason', async () => {
    const { localPort, child, stderr } = await setup.tunnel(setup.config(sleeper.jobId), 80, 'example.com');
    try {
      await eventually(async () => {
        await fetch(`http://127.0.0.1:${localPort}/`).catch(() => undefined);
        expect(stderr()).to.contain('only the job\'s own ports can be forwarded');
        return true;
      }, 10_000);
    } finally {
      await stopped(child);
    }
  });
});

describe('agent SSH (docker runtime, against Podman)', function () {
  this.timeout(60_000);
  let podman: PodmanAgent;
  let setup: SshClientSetup;
  let sleeper: JobSubmission;
  let server: JobSubmission;
  let httpPort: number;

  before(async function () {
    this.timeout(600_000);
    try {
      await ensurePodman();
    } catch (error) {
      console.log(`      skipped: no Podman to run containers (${(error as Error).message.split('\n')[0]})`);
      this.skip();
    }
    podman = await startPodmanAgent('agent-ssh-docker');
    setup = new SshClientSetup(podman.agent.url, podman.token);
    await setup.init((await podman.client.health()).sshHostKey!);
    httpPort = await freePort();
    sleeper = submission({ runName: 'ssh-container', image: TEST_IMAGE, commands: ['sleep 600'] });
    server = submission({
      runName: 'ssh-container-server',
      image: TEST_IMAGE,
      commands: ['mkdir -p /www', 'echo hello from the job > /www/index.html', 'echo ready', `httpd -f -p ${httpPort} -h /www`],
      ports: [httpPort],
    });
    await podman.client.submit(sleeper);
    await podman.client.submit(server);
    await waitForState(podman.client, sleeper.jobId, ['running'], 60_000);
    await waitForLine(podman.client, server.jobId, 'ready', 60_000);
  });

  after(async () => {
    await podman?.stop();
    await removeStandInImage(VENV_IMAGE);
    setup?.remove();
  });

  sshCases(() => ({ client: podman.client, setup, sleeper, server, httpPort, workingDir: '/workflow' }));

  it('enters the virtual environment the job\'s commands ran in, with a command and in a login shell', async function () {
    this.timeout(120_000);
    await ensureStandInImage(VENV_IMAGE, { uv: UV_VENV_STAND_IN });
    const venvJob = submission({ runName: 'ssh-venv', image: VENV_IMAGE, venvPython: '3.11', commands: ['sleep 600'] });
    await podman.client.submit(venvJob);
    await waitForState(podman.client, venvJob.jobId, ['running'], 60_000);
    const config = setup.config(venvJob.jobId);
    const expected = 'venv=/orchestrator/venv\nPython 3.11 (uv venv -q --prompt orchestrator --python 3.11 --seed /orchestrator/venv)\n';
    const command = await setup.ssh(config, ['job', 'echo venv=$VIRTUAL_ENV; python --version']);
    expect(command.code, command.stderr).to.equal(0);
    expect(command.stdout).to.equal(expected);
    const login = await setup.ssh(config, ['job'], 'echo venv=$VIRTUAL_ENV\npython --version\n');
    expect(login.stdout).to.equal(expected);
    const plain = await setup.ssh(setup.config(sleeper.jobId), ['job', 'echo venv=$VIRTUAL_ENV']);
    expect(plain.stdout, 'a job that names its image has no virtual environment of ours').to.equal('venv=\n');
  });
});
