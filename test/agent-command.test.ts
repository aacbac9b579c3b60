import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { AgentClient } from '../agent/client.js';
import { orchestratorCommand, startAgentProcess } from '../agent/launch.js';
import { collectLogs, randomToken, submission } from './helpers/agent-jobs.js';

function exitOf(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => child.once('exit', (code) => resolve(code)));
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

async function waitUntilGone(pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (alive(pid)) {
    if (Date.now() > deadline) throw new Error(`process ${pid} still alive after ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('orchestrator agent (command)', function () {
  this.timeout(30_000);
  let scratch: string;
  const started: number[] = [];

  before(() => {
    scratch = mkdtempSync(join(tmpdir(), 'agent-command-test-'));
  });

  after(async () => {
    for (const pid of started) if (alive(pid)) process.kill(pid, 'SIGKILL');
    rmSync(scratch, { recursive: true, force: true });
  });

  it('refuses to start without ORCHESTRATOR_AGENT_TOKEN', async () => {
    const { command, args } = orchestratorCommand();
    const env = { ...process.env };
    delete env.ORCHESTRATOR_AGENT_TOKEN;
    const child = spawn(command, [...args, 'agent', '--runtime', 'process'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    expect(await exitOf(child)).to.equal(2);
    expect(stderr).to.include('ORCHESTRATOR_AGENT_TOKEN must be set');
  });

  it('rejects an invalid GPU spec with a clear message', async () => {
    const { command, args } = orchestratorCommand();
    const child = spawn(command, [...args, 'agent', '--runtime', 'process', '--gpu', 'H100:lots'], {
      env: { ...process.env, ORCHESTRATOR_AGENT_TOKEN: randomToken() }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    expect(await exitOf(child)).to.equal(2);
    expect(stderr).to.include('invalid GPU spec "H100:lots"');
  });

  it('prints its URL once listening and serves the API with the flags it was given', async () => {
    const token = randomToken();
    const { child, url } = await startAgentProcess({ token, instanceId: '0042', gpu: 'H100:80GB:2', runtime: 'process', workDir: join(scratch, 'flags') });
    started.push(child.pid!);
    expect(url).to.match(/^http:\/\/127\.0\.0\.1:\d+$/);
    const health = await new AgentClient(url, token).health();
    expect(health).to.include({ ok: true, instanceId: '0042', runtime: 'process' });
    expect(health.gpu).to.deep.equal({ name: 'H100', memoryMib: 81920, count: 2 });
    child.kill('SIGTERM');
    expect(await exitOf(child)).to.equal(0);
  });

  it('keeps running and serving jobs after the process that started it is gone', async () => {
    const token = randomToken();
    const workDir = join(scratch, 'orphan');
    const parent = join(scratch, 'parent.mjs');
    const launch = pathToFileURL(join(process.cwd(), 'agent', 'launch.ts')).href;
    writeFileSync(parent, [
      `import { startAgentProcess } from ${JSON.stringify(launch)};`,
      `const { child, url } = await startAgentProcess({ token: ${JSON.stringify(token)}, instanceId: 'orphan', runtime: 'process', workDir: ${JSON.stringify(workDir)}, detached: true });`,
      `console.log(JSON.stringify({ url, pid: child.pid }));`,
      `process.exit(0);`,
    ].join('\n'));
    const parentProcess = spawn(process.execPath, ['--import', 'tsx', parent], { stdio: ['ignore', 'pipe', 'inherit'] });
    let output = '';
    parentProcess.stdout!.on('data', (chunk: Buffer) => { output += chunk.toString(); });
    expect(await exitOf(parentProcess)).to.equal(0);
    const { url, pid } = JSON.parse(output.trim()) as { url: string; pid: number };
    started.push(pid);

    const client = new AgentClient(url, token);
    const job = submission({ commands: ['seq 1 500'] });
    await client.submit(job);
    const entries = await collectLogs(client, job.jobId);
    expect(entries).to.have.length(500);
    expect((await client.health()).ok).to.equal(true);
    expect(alive(pid)).to.equal(true);
    expect(readFileSync(join(workDir, 'agent.log'), 'utf8')).to.include('job submitted').and.not.include(token);

    process.kill(pid, 'SIGTERM');
    await waitUntilGone(pid, 5000);
  });
});
