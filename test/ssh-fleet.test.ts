import { expect } from 'chai';
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Fleet, Instance, Run } from '../api/objects.js';
import { formatSpecError, parseSpecText } from '../api/parse.js';
import { unitFile, unitName } from '../backends/ssh/install.js';
import { addProject, makeHome, runCli, show } from './helpers/cli.js';
import { freePort } from './helpers/ports.js';
import { eventually, FAST_TIMINGS, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';
import { makeKeyPair, SSHD, TestSshd, type KeyPair } from './helpers/sshd.js';

const FIXTURES = join(import.meta.dirname, 'fixtures', 'nvidia-smi');
/** Copying Node (100MB) to each host takes seconds, more on a busy machine, as may an agent's restart: neither timeout is what is tested here. */
const TIMINGS = { ...FAST_TIMINGS, provisioningTimeoutMs: 600_000, unreachableGraceMs: 60_000 };

/** An nvidia-smi that answers the detection query as an H100 did (test/fixtures/nvidia-smi), for a host "with a GPU". */
function fakeNvidiaSmi(dir: string): string {
  const bin = join(dir, 'gpu-bin');
  mkdirSync(bin);
  copyFileSync(join(FIXTURES, 'h100-name-memory.csv'), join(bin, 'name,memory.total.csv'));
  copyFileSync(join(FIXTURES, 'h100-usage-idle.csv'), join(bin, 'index,name,utilization.gpu,memory.used,memory.total.csv'));
  writeFileSync(join(bin, 'nvidia-smi'), '#!/bin/sh\nexec cat "$(dirname "$0")/${1#--query-gpu=}.csv"\n');
  chmodSync(join(bin, 'nvidia-smi'), 0o755);
  return bin;
}

/** A host "with AMD GPUs": an amd-smi (ROCm 7's form, eight MI300X) or a rocm-smi (two MI210) that answers the detection query. */
function fakeAmdTool(dir: string, tool: 'amd-smi' | 'rocm-smi'): string {
  const bin = join(dir, `${tool}-bin`);
  mkdirSync(bin);
  const answer = tool === 'amd-smi'
    ? { gpu_data: Array.from({ length: 8 }, (_, gpu) => ({ gpu, asic: { market_name: 'AMD Instinct MI300X' }, vram: { size: { value: 196608, unit: 'MB' } } })) }
    : Object.fromEntries([0, 1].map((card) => [`card${card}`, { 'Card Series': 'AMD Instinct MI210', 'VRAM Total Memory (B)': '68702699520' }]));
  writeFileSync(join(bin, tool), `#!/bin/sh\ncat <<'JSON'\n${JSON.stringify(answer)}\nJSON\n`);
  chmodSync(join(bin, tool), 0o755);
  return bin;
}

/** An `id` that says uid 1000 and a `sudo` that wants a password: a host whose user may not become root. */
function notRoot(dir: string): string {
  const bin = join(dir, 'user-bin');
  mkdirSync(bin);
  writeFileSync(join(bin, 'id'), '#!/bin/sh\n[ "$1" = -u ] && { echo 1000; exit 0; }\nexec /usr/bin/id "$@"\n');
  writeFileSync(join(bin, 'sudo'), '#!/bin/sh\necho "sudo: a password is required" >&2\nexit 1\n');
  chmodSync(join(bin, 'id'), 0o755);
  chmodSync(join(bin, 'sudo'), 0o755);
  return bin;
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** The pids of the agents and supervisors installed on a test host, from the pid files the install writes. */
function installedPids(sshd: TestSshd): number[] {
  const agents = join(sshd.hostDir, 'agents');
  if (!existsSync(agents)) return [];
  return readdirSync(agents).flatMap((id) => ['agent.pid', 'supervisor.pid']
    .map((file) => join(agents, id, file)).filter(existsSync).map((file) => Number(readFileSync(file, 'utf8').trim())));
}

/** The sshd processes serving the sessions the server holds open: the children of the host's listener. */
function sessionPids(sshd: TestSshd): number[] {
  const listener = Number(readFileSync(join(sshd.dir, 'sshd.pid'), 'utf8').trim());
  return execFileSync('ps', ['-o', 'pid=', '--ppid', String(listener)], { encoding: 'utf8' }).split('\n').map(Number).filter(Boolean);
}

describe('SSH fleets on real OpenSSH servers', function () {
  this.timeout(600_000);
  let server: TestServer;
  let home: ReturnType<typeof makeHome>;
  let work: string;
  let key: KeyPair;
  let plain: TestSshd;
  let gpu: TestSshd;
  let jump: TestSshd;
  let stranger: TestSshd;
  let noSudo: TestSshd;
  let amd: TestSshd;
  let rocm: TestSshd;
  /** A host whose sshd is not running: nothing answers at its address and port. */
  let down: { address: string; port: number };
  const cli = (args: string[]) => runCli(args, { home: home.home, cwd: work, timeoutMs: 300_000 });
  const fleet = async (name: string): Promise<Fleet | null> => {
    const answer = await server.api('GET', `/api/projects/main/fleets/${name}`);
    return answer.status === 200 ? answer.body as Fleet : null;
  };
  const hostOf = (f: Fleet | null, sshd: { address: string; port: number }): Instance | undefined => f?.instances.find((i) => i.host === `${sshd.address}:${sshd.port}`);
  const writeFleet = (name: string, hosts: string) => {
    const file = join(work, `${name}.yml`);
    writeFileSync(file, `type: fleet\nname: ${name}\nssh_config:\n  user: root\n  identity_file: ${key.privateKey}\n  hosts:\n${hosts}`);
    return file;
  };
  /** Waits until the first host runs a supervisor and an agent other than `before`'s, and is idle. */
  const startedAnew = (id: string, before: number[], timeoutMs: number) => eventually(async () => {
    const now = ['supervisor.pid', 'agent.pid'].map((file) => Number(readFileSync(join(plain.hostDir, 'agents', id, file), 'utf8')));
    return now.every((pid, index) => pid !== before[index] && isAlive(pid)) && hostOf(await fleet('own'), plain)?.status === 'idle';
  }, timeoutMs, 'a new supervisor and agent, and the host idle');
  /** A 2-node task named `name`, which needs both working hosts of the fleet `own`, runs to its end. */
  const runsOnBothHosts = async (name: string) => {
    const file = join(work, `${name}.yml`);
    writeFileSync(file, `type: task\nname: ${name}\nnodes: 2\ncommands:\n  - echo ran on $ORCHESTRATOR_NODE_RANK\n`);
    const result = await cli(['apply', '-f', file, '-y']);
    expect(result.code, show(result)).to.equal(0);
    expect(result.stderr).to.match(/^done: /m);
  };
  const hostEntry = (sshd: { address: string; port: number }, extra = '') => `    - hostname: ${sshd.address}\n      port: ${sshd.port}\n${extra}`;
  const viaJump = () => `      proxy_jump:\n        hostname: ${jump.address}\n        port: ${jump.port}\n`;
  /** The fleet `own`: the two hosts that work (the second behind the head node, unless left out), and three that fail. */
  const ownHosts = (withGpu = true) => [hostEntry(plain), withGpu ? hostEntry(gpu, viaJump()) : '', hostEntry(stranger), hostEntry(noSudo), hostEntry(down)].join('');

  before(async function () {
    if (!existsSync(SSHD)) throw new Error(`${SSHD} is missing: scripts/test-setup.sh installs openssh-server`);
    work = mkdtempSync(join(tmpdir(), 'orch-ssh-fleet-'));
    key = makeKeyPair(work, 'fleet-key');
    const other = makeKeyPair(work, 'other-key');
    plain = new TestSshd({ address: '127.0.0.2', authorized: [key.publicKey] });
    gpu = new TestSshd({ address: '127.0.0.3', authorized: [key.publicKey], path: [fakeNvidiaSmi(work)] });
    jump = new TestSshd({ address: '127.0.0.4', authorized: [key.publicKey], logLevel: 'DEBUG1' });
    stranger = new TestSshd({ address: '127.0.0.5', authorized: [other.publicKey] });
    noSudo = new TestSshd({ address: '127.0.0.6', authorized: [key.publicKey], path: [notRoot(work)] });
    amd = new TestSshd({ address: '127.0.0.8', authorized: [key.publicKey], path: [fakeAmdTool(work, 'amd-smi')] });
    rocm = new TestSshd({ address: '127.0.0.9', authorized: [key.publicKey], path: [fakeAmdTool(work, 'rocm-smi')] });
    down = { address: '127.0.0.7', port: await freePort() };
    await Promise.all([plain, gpu, jump, stranger, noSudo, amd, rocm].map((sshd) => sshd.start()));
    server = await startTestServer('pglite', LOCAL_CONFIG, { instanceTimings: TIMINGS });
    home = makeHome();
    await addProject(home.home, server.url);
  });

  after(async function () {
    if (server) {
      for (const f of (await server.api('GET', '/api/projects/main/fleets')).body as Fleet[]) await server.api('DELETE', `/api/projects/main/fleets/${f.name}`);
      await eventually(async () => ((await server.api('GET', '/api/projects/main/instances')).body as unknown[]).length === 0, 120_000, 'every instance to end').catch(() => undefined);
      await server.stop();
    }
    for (const sshd of [plain, gpu, jump, stranger, noSudo, amd, rocm]) {
      if (!sshd) continue;
      for (const pid of installedPids(sshd)) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
      await sshd.remove();
    }
    home?.remove();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('installs the agent on each host, one through a head node, and fails only the hosts that refuse the key, sudo or the connection', async () => {
    const file = writeFleet('own', ownHosts());
    const applied = await cli(['apply', '-f', file, '-y']);
    expect(applied.code, show(applied)).to.equal(0);
    expect(applied.stderr).to.contain(`hosts`);
    expect(applied.stderr).to.contain(`root@${gpu.address}:${gpu.port} via ${jump.address}`);
    const ready = await eventually(async () => {
      const f = await fleet('own');
      const [a, b, c] = [hostOf(f, plain), hostOf(f, gpu), hostOf(f, stranger)];
      return a?.status === 'idle' && b?.status === 'idle' && c?.status === 'terminated' ? f : null;
    }, 300_000, 'two hosts idle and the third failed');
    expect(hostOf(ready, gpu)!.gpu).to.deep.include({ name: 'H100', count: 1 });
    expect(hostOf(ready, plain)!.gpu).to.deep.include({ count: 0 });
    expect(hostOf(ready, stranger)!.statusMessage).to.contain(`root@${stranger.address}:${stranger.port} refused the key ${key.privateKey}`);
    const failed = await eventually(async () => {
      const f = await fleet('own');
      return hostOf(f, noSudo)?.status === 'terminated' && hostOf(f, down)?.statusMessage ? f : null;
    }, 30_000, 'the host without sudo failed, and the one that is down said why');
    expect(hostOf(failed, noSudo)!.statusMessage).to.contain('user root is not root and cannot sudo without a password');
    expect(hostOf(failed, down)!.statusMessage).to.contain(`cannot connect to ${down.address}:${down.port} over SSH: connect ECONNREFUSED`);
    expect(jump.log, 'the head node carried the connection to the host behind it').to.match(new RegExp(`target ${gpu.address.replace(/\./g, '\\.')} port ${gpu.port}`));

    const table = await cli(['fleet']);
    expect(table.code, show(table)).to.equal(0);
    expect(table.stdout, table.stdout).to.match(new RegExp(`ssh ${gpu.address}:${gpu.port}\\s+H100:79.65GB:1\\s+idle`));
    expect(table.stdout).to.contain(`ssh ${stranger.address}:${stranger.port}`);
    expect(table.stdout).to.contain('refused the key');
    expect(readdirSync(join(gpu.hostDir, 'agents')), 'the agent of the host behind the head node').to.have.length(1);
    const [id] = readdirSync(join(plain.hostDir, 'agents'));
    const agentPort = new URL(JSON.parse(readFileSync(join(plain.hostDir, 'agents', id!, 'agent.out'), 'utf8')).url).port;
    const listening = execFileSync('ss', ['-Hltn'], { encoding: 'utf8' }).split('\n').map((line) => line.trim().split(/\s+/)[3]).filter((a) => a?.endsWith(`:${agentPort}`));
    expect(listening, 'the agent listens on the host\'s loopback only').to.deep.equal([`127.0.0.1:${agentPort}`]);
  });

  it('runs a 2-node task across two hosts, which reach each other at their own addresses', async () => {
    const file = join(work, 'pair.yml');
    writeFileSync(file, 'type: task\nname: pair\nnodes: 2\ncommands:\n  - echo "rank=$ORCHESTRATOR_NODE_RANK master=$ORCHESTRATOR_MASTER_NODE_IP ips=$(echo $ORCHESTRATOR_NODES_IPS)"\n');
    const result = await cli(['apply', '-f', file, '-y']);
    expect(result.code, show(result)).to.equal(0);
    const runs = await eventually(async () => {
      const all = (await server.api('GET', '/api/projects/main/runs?all=true')).body as Run[];
      const pair = all.find((r) => r.name === 'pair');
      return pair && ['done', 'failed', 'terminated'].includes(pair.status) ? pair : null;
    }, 120_000, 'the task to end');
    expect(runs.status, JSON.stringify(runs)).to.equal('done');
    const logs = await cli(['logs', 'pair']);
    expect(logs.stdout).to.match(/rank=0 master=127\.0\.0\.[23] ips=127\.0\.0\.[23] 127\.0\.0\.[23]/);
    expect(logs.stdout).to.contain(plain.address);
    expect(logs.stdout).to.contain(gpu.address);
  });

  it('places a run on the host that has what it needs, and keeps a run off a host not reached yet', async () => {
    const gpuTask = join(work, 'on-gpu.yml');
    writeFileSync(gpuTask, 'type: task\nname: on-gpu\nresources:\n  gpu: H100\ncommands:\n  - echo "on $ORCHESTRATOR_MASTER_NODE_IP"\n');
    const placed = await cli(['apply', '-f', gpuTask, '-y']);
    expect(placed.code, show(placed)).to.equal(0);
    expect(placed.stdout).to.contain(`on ${gpu.address}`);
    // The host that is down may have one: the run waits for it rather than fail, and is never placed on it.
    const a100 = join(work, 'on-a100.yml');
    writeFileSync(a100, 'type: task\nname: on-a100\nresources:\n  gpu: A100\ncommands:\n  - "true"\n');
    const waiting = await cli(['apply', '-f', a100, '-y', '-d', '--queue']);
    expect(waiting.code, show(waiting)).to.equal(0);
    const run = await eventually(async () => {
      const found = (await server.api('GET', '/api/projects/main/runs/on-a100')).body as Run;
      return found.statusMessage ? found : null;
    }, 30_000, 'the run to say why it waits');
    expect(run).to.deep.include({ status: 'submitted', statusMessage: 'waiting: 1 host of SSH fleet own not reached yet', instance: null });
    const stopped = await cli(['stop', 'on-a100']);
    expect(stopped.code, show(stopped)).to.equal(0);
  });

  it('lets orchestrator ssh into a run on a host, through the agent\'s tunnel', async () => {
    const file = join(work, 'box.yml');
    writeFileSync(file, 'type: task\nname: box\ncommands:\n  - sleep 300\n');
    const applied = await cli(['apply', '-f', file, '-y', '-d', '--no-ssh-config']);
    expect(applied.code, show(applied)).to.equal(0);
    await eventually(async () => ((await server.api('GET', '/api/projects/main/runs/box')).body as Run).status === 'running', 60_000, 'the run to start');
    const entered = await cli(['ssh', 'box', '--', 'echo', '$ORCHESTRATOR_RUN_NAME', '$ORCHESTRATOR_MASTER_NODE_IP']);
    expect(entered.code, show(entered)).to.equal(0);
    expect(entered.stdout).to.match(/^box 127\.0\.0\.[23]\n$/);
    const stopped = await cli(['stop', 'box']);
    expect(stopped.code, show(stopped)).to.equal(0);
  });

  it('serves a service from a host through the server\'s proxy', async () => {
    const file = join(work, 'web.yml');
    // The hosts share this machine's network (process runtime): a free port, not one another test may hold.
    const port = await freePort();
    writeFileSync(file, `type: service\nname: web\nport: ${port}\nauth: false\ncommands:\n  - echo served from $ORCHESTRATOR_MASTER_NODE_IP > index.html\n  - python3 -m http.server ${port}\n`);
    const applied = await cli(['apply', '-f', file, '-y', '-d']);
    expect(applied.code, show(applied)).to.equal(0);
    const answer = await eventually(async () => {
      const response = await fetch(`${server.url}/proxy/services/main/web/`).catch(() => null);
      return response?.status === 200 ? response.text() : null;
    }, 120_000, 'the service to answer').catch(async (error: Error) => {
      const run = (await server.api('GET', '/api/projects/main/runs/web')).body as Run;
      throw new Error(`${error.message}; the service: ${JSON.stringify(run)}`);
    });
    expect(answer).to.match(/^served from 127\.0\.0\.[23]\n$/);
    const stopped = await cli(['stop', 'web']);
    expect(stopped.code, show(stopped)).to.equal(0);
  });

  it('brings the agent back when its process dies, and its supervisor too when that is gone', async () => {
    const [id] = readdirSync(join(plain.hostDir, 'agents'));
    const pidFile = join(plain.hostDir, 'agents', id!, 'agent.pid');
    const before = Number(readFileSync(pidFile, 'utf8'));
    process.kill(before, 'SIGKILL');
    await eventually(async () => {
      const now = Number(readFileSync(pidFile, 'utf8'));
      return now !== before && isAlive(now) && hostOf(await fleet('own'), plain)?.status === 'idle';
    }, 30_000, 'a new agent, and the host idle');

    // As after a reboot without systemd: the supervisor is gone too. The server starts it again once the agent stops answering.
    const supervisorFile = join(plain.hostDir, 'agents', id!, 'supervisor.pid');
    const [supervisor, agent] = [Number(readFileSync(supervisorFile, 'utf8')), Number(readFileSync(pidFile, 'utf8'))];
    process.kill(supervisor, 'SIGKILL');
    process.kill(agent, 'SIGKILL');
    await startedAnew(id!, [supervisor, agent], 60_000);
    await runsOnBothHosts('after');
  });

  it('brings a host that rebooted back with its agent: once it answers again, the server starts its supervisor and agent anew', async () => {
    const [id] = readdirSync(join(plain.hostDir, 'agents'));
    const pidFile = (file: string) => join(plain.hostDir, 'agents', id!, file);
    const [supervisor, agent] = [Number(readFileSync(pidFile('supervisor.pid'), 'utf8')), Number(readFileSync(pidFile('agent.pid'), 'utf8'))];
    // A reboot without systemd: sshd goes away with every process of the host, the server's sessions and tunnel included.
    const sessions = sessionPids(plain);
    await plain.stop();
    for (const pid of [supervisor, agent, ...sessions]) if (isAlive(pid)) process.kill(pid, 'SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    await plain.start(true);
    await startedAnew(id!, [supervisor, agent], 120_000);
    expect(readdirSync(join(plain.hostDir, 'agents')), 'the same install, started again').to.deep.equal([id]);
    await runsOnBothHosts('after-reboot');
  });

  it('detects AMD GPUs with amd-smi or rocm-smi, and splits each host into the blocks it is given', async () => {
    const file = writeFleet('amd', hostEntry(amd, '      blocks: auto\n') + hostEntry(rocm, '      blocks: 2\n'));
    const applied = await cli(['apply', '-f', file, '-y']);
    expect(applied.code, show(applied)).to.equal(0);
    const ready = await eventually(async () => {
      const f = await fleet('amd');
      return hostOf(f, amd)?.status === 'idle' && hostOf(f, rocm)?.status === 'idle' ? f : null;
    }, 300_000, 'both AMD hosts idle');
    expect(hostOf(ready, amd)!.gpu).to.deep.include({ name: 'MI300X', count: 8, memoryMib: 196608 });
    expect(hostOf(ready, rocm)!.gpu).to.deep.include({ name: 'MI210', count: 2, memoryMib: 65520 });
    expect(hostOf(ready, amd)!.blocks).to.deep.equal({ busy: 0, total: 8 });
    expect(hostOf(ready, rocm)!.blocks).to.deep.equal({ busy: 0, total: 2 });

    for (const name of ['share-a', 'share-b']) {
      const task = join(work, `${name}.yml`);
      writeFileSync(task, `type: task\nname: ${name}\nfleets: [amd]\nresources:\n  gpu: MI300X:2\ncommands:\n  - echo "gpus=$ORCHESTRATOR_GPUS_NUM devices=$CUDA_VISIBLE_DEVICES"\n  - sleep 300\n`);
      const started = await cli(['apply', '-f', task, '-y', '-d']);
      expect(started.code, show(started)).to.equal(0);
    }
    const shared = await eventually(async () => {
      const runs = await Promise.all(['share-a', 'share-b'].map(async (name) => (await server.api('GET', `/api/projects/main/runs/${name}`)).body as Run));
      return runs.every((r) => r.status === 'running') ? runs : null;
    }, 120_000, 'both tasks running on the MI300X host');
    expect(shared.map((r) => r.instance)).to.deep.equal([hostOf(ready, amd)!.name, hostOf(ready, amd)!.name]);
    const table = await cli(['fleet']);
    expect(table.stdout, table.stdout).to.match(new RegExp(`ssh ${amd.address}:${amd.port}\\s+MI300X:192GB:8\\s+busy\\b.*blocks 4/8 busy`));
    const logs = await Promise.all(['share-a', 'share-b'].map(async (name) => (await eventually(async () => {
      const out = (await cli(['logs', name])).stdout;
      return out.includes('gpus=') ? out : null;
    }, 30_000, `the log of ${name}`)).trim()));
    expect(logs.sort()).to.deep.equal(['gpus=2 devices=0,1', 'gpus=2 devices=2,3']);
    for (const name of ['share-a', 'share-b']) expect((await cli(['stop', name])).code).to.equal(0);
    const deleted = await cli(['fleet', 'delete', 'amd', '-y']);
    expect(deleted.code, show(deleted)).to.equal(0);
    await eventually(async () => (await fleet('amd')) === null, 120_000, 'the AMD fleet gone');
  });

  it('finds its agents again after the server restarts: the tunnels are opened anew and runs go on', async () => {
    const oldUrl = server.url;
    const agents = [...installedPids(plain), ...installedPids(gpu)];
    await server.restart();
    const config = join(home.home, '.orchestrator', 'config.yml');
    writeFileSync(config, readFileSync(config, 'utf8').replace(oldUrl, server.url));
    expect(agents.filter(isAlive), 'the agents outlive the server').to.have.length(4);
    const file = join(work, 'again.yml');
    writeFileSync(file, 'type: task\nname: again\nnodes: 2\ncommands:\n  - echo again on $ORCHESTRATOR_NODE_RANK\n');
    const result = await cli(['apply', '-f', file, '-y']);
    expect(result.code, show(result)).to.equal(0);
    expect(result.stderr).to.match(/^done: /m);
    expect([...installedPids(plain), ...installedPids(gpu)], 'the same agents, not new installs').to.deep.equal(agents);
  });

  it('drains and uninstalls a host removed from ssh_config, and installs one added back', async () => {
    const pids = installedPids(gpu);
    expect(pids).to.have.length(2);
    const busy = join(work, 'last-on-gpu.yml');
    writeFileSync(busy, 'type: task\nname: last-on-gpu\nresources:\n  gpu: H100\ncommands:\n  - sleep 6\n');
    expect((await cli(['apply', '-f', busy, '-y', '-d'])).code).to.equal(0);
    await eventually(async () => ((await server.api('GET', '/api/projects/main/runs/last-on-gpu')).body as Run).status === 'running', 60_000, 'the run on the host');
    const without = await cli(['apply', '-f', writeFleet('own', ownHosts(false)), '-y']);
    expect(without.code, show(without)).to.equal(0);
    expect(hostOf(await fleet('own'), gpu)?.status, 'a busy host finishes its run first').to.equal('busy');
    await eventually(async () => hostOf(await fleet('own'), gpu) === undefined, 120_000, 'the host gone from the fleet');
    expect(((await server.api('GET', '/api/projects/main/runs/last-on-gpu')).body as Run).status, 'its run ended by itself').to.equal('done');
    expect(existsSync(gpu.hostDir), 'nothing installed left on the host').to.equal(false);
    expect(pids.filter(isAlive), 'no agent or supervisor left').to.deep.equal([]);
    expect(hostOf(await fleet('own'), plain)?.status).to.equal('idle');

    const back = await cli(['apply', '-f', writeFleet('own', ownHosts()), '-y']);
    expect(back.code, show(back)).to.equal(0);
    await eventually(async () => hostOf(await fleet('own'), gpu)?.status === 'idle', 300_000, 'the host added back idle');
  });

  it('fleet delete stops every agent and leaves nothing behind on the hosts', async () => {
    const pids = [...installedPids(plain), ...installedPids(gpu)];
    expect(pids, JSON.stringify({ plain: installedPids(plain), gpu: installedPids(gpu), fleet: await fleet('own') })).to.have.length(4);
    const deleted = await cli(['fleet', 'delete', 'own', '-y']);
    expect(deleted.code, show(deleted)).to.equal(0);
    await eventually(async () => (await fleet('own')) === null, 120_000, 'the fleet gone');
    expect(existsSync(plain.hostDir), 'nothing installed left on the first host').to.equal(false);
    expect(existsSync(gpu.hostDir), 'nothing installed left on the second host').to.equal(false);
    expect(pids.filter(isAlive)).to.deep.equal([]);
  });

  it('stops a host whose host key changed, with the reason, and never trusts the new key by itself', async () => {
    const file = writeFleet('keys', hostEntry(plain));
    const applied = await cli(['apply', '-f', file, '-y']);
    expect(applied.code, show(applied)).to.equal(0);
    await eventually(async () => hostOf(await fleet('keys'), plain)?.status === 'idle', 300_000, 'the host idle');
    const sessions = sessionPids(plain);
    expect(sessions, 'the server keeps a session open').not.to.deep.equal([]);
    await plain.stop();
    await plain.start();
    for (const pid of sessions) process.kill(pid, 'SIGTERM');
    const failed = await eventually(async () => {
      const host = hostOf(await fleet('keys'), plain);
      return host?.status === 'terminated' && /host key/.test(host.statusMessage) ? host : null;
    }, 120_000, 'the host stopped for its key');
    expect(failed.statusMessage).to.contain(`the host key of ${plain.address}:${plain.port} changed: recorded SHA256:`);
    const table = await cli(['fleet']);
    expect(table.stdout).to.contain('host key');

    // As the reason says: the host leaves the fleet (its key is forgotten) and comes back, a first contact again.
    const untrusted = installedPids(plain);
    expect(untrusted.filter(isAlive), 'the agent on a host that is not trusted is left alone').to.have.length(2);
    const emptied = await cli(['apply', '-f', writeFleet('keys', hostEntry(stranger)), '-y']);
    expect(emptied.code, show(emptied)).to.equal(0);
    const back = await cli(['apply', '-f', writeFleet('keys', hostEntry(plain)), '-y']);
    expect(back.code, show(back)).to.equal(0);
    await eventually(async () => hostOf(await fleet('keys'), plain)?.status === 'idle', 300_000, 'the host trusted again, and idle');
    expect(readdirSync(join(plain.hostDir, 'agents')), 'the agent left behind was replaced').to.have.length(1);
    expect(untrusted.filter(isAlive)).to.deep.equal([]);

    const a100 = join(work, 'want-a100.yml');
    writeFileSync(a100, 'type: task\nname: want-a100\nfleets: [keys]\nresources:\n  gpu: A100\ncommands:\n  - "true"\n');
    const refused = await cli(['apply', '-f', a100, '-y']);
    expect(refused.code, show(refused)).to.equal(1);
    expect(refused.stderr).to.contain('no offers: no host of SSH fleet keys has');
  });
});

describe('the systemd unit of an SSH host\'s agent', () => {
  // The test hosts are sshd processes on this machine, whose PID 1 is not systemd, so the unit is never started here:
  // systemd's own parser checks it instead, as systemd would read it from /etc/systemd/system.
  it('is read by systemd without a warning: it restarts the agent always and starts it at boot', function () {
    if (!existsSync('/usr/bin/systemd-analyze')) this.skip();
    const dir = mkdtempSync(join(tmpdir(), 'orch-unit-'));
    const unit = join(dir, unitName('f00d'));
    writeFileSync(unit, unitFile('f00d', '/root/.orchestrator-host/agents/f00d'));
    const verified = spawnSync('systemd-analyze', ['verify', unit], { encoding: 'utf8' });
    rmSync(dir, { recursive: true, force: true });
    expect([verified.status, verified.stderr.trim()]).to.deep.equal([0, '']);
    const text = unitFile('f00d', '/root/.orchestrator-host/agents/f00d');
    expect(text).to.match(/^ExecStart=\/bin\/sh \/root\/\.orchestrator-host\/agents\/f00d\/run-agent\.sh$/m);
    expect(text).to.match(/^Restart=always$/m);
    expect(text).to.match(/^WantedBy=multi-user\.target$/m);
  });
});

describe('docs/fleets.md', () => {
  it('has configurations that are valid as written: each fleet and task in it parses without an error', () => {
    const doc = readFileSync(join(import.meta.dirname, '..', 'docs', 'fleets.md'), 'utf8');
    const blocks = [...doc.matchAll(/```yaml\n([\s\S]*?)```/g)].map((match) => match[1]!);
    expect(blocks.length).to.be.at.least(3);
    for (const block of blocks) {
      const { specs, errors } = parseSpecText(block, 'fleets.md', {});
      expect(errors.map(formatSpecError), block).to.deep.equal([]);
      expect(specs).to.have.length(1);
    }
  });
});
