import { expect } from 'chai';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { KEEP_ALIVE_TIMEOUT_MS } from '../api/keep-alive.js';
import { AgentClient, AgentError, AgentUnreachableError } from '../agent/client.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { base64, collectLogs, randomToken, submission, waitForLine, waitForState } from './helpers/agent-jobs.js';

function hasNvidiaSmi(): boolean {
  return (process.env.PATH ?? '').split(':').some((dir) => existsSync(join(dir, 'nvidia-smi')));
}

async function expectAgentError(promise: Promise<unknown>, status: number, code: string): Promise<AgentError> {
  try {
    await promise;
  } catch (error) {
    expect(error).to.be.instanceOf(AgentError);
    expect((error as AgentError).status).to.equal(status);
    expect((error as AgentError).code).to.equal(code);
    return error as AgentError;
  }
  throw new Error(`expected an AgentError ${status} ${code}`);
}

/** Running or sleeping; a killed process whose parent has not reaped it yet (a zombie) counts as gone. */
function processAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

describe('agent (process runtime)', function () {
  this.timeout(20_000);
  let scratch: string;
  let agent: RunningAgent;
  let client: AgentClient;
  let token: string;

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'agent-test-'));
    token = randomToken();
    agent = await startAgent({ token, runtime: 'process', instanceId: 'agent-test', gpu: 'A10G:24GB:2', workDir: join(scratch, 'agent') });
    client = new AgentClient(agent.url, token);
  });

  after(async () => {
    await agent.close();
    rmSync(scratch, { recursive: true, force: true });
  });

  it('reports its health: runtime, instance id, declared GPUs and known jobs', async () => {
    const job = submission({ commands: ['true'] });
    await client.submit(job);
    const health = await client.health();
    expect(health.ok).to.equal(true);
    expect(health.runtime).to.equal('process');
    expect(health.instanceId).to.equal('agent-test');
    expect(health.gpu).to.deep.equal({ name: 'A10G', memoryMib: 24 * 1024, count: 2 });
    expect(health.version).to.match(/^\d+\.\d+\.\d+/);
    expect(health.jobs).to.include(job.jobId);
  });

  it('holds an idle connection a minute, so that the server\'s calls seconds apart reuse it instead of reconnecting', async () => {
    const answer = await request(`${agent.url}/api/health`, { headers: { authorization: `Bearer ${token}` } });
    await answer.body.dump();
    expect(answer.statusCode).to.equal(200);
    // What undici keeps an idle connection by (less a margin); with Node's default of 5 s it reconnected at each look.
    expect(answer.headers['keep-alive']).to.equal(`timeout=${KEEP_ALIVE_TIMEOUT_MS / 1000}`);
  });

  it('falls back to the process runtime when no engine answers, and refuses docker then', async () => {
    const dockerHost = `unix://${join(scratch, 'no-engine.sock')}`;
    const auto = await startAgent({ token, runtime: 'auto', dockerHost, workDir: join(scratch, 'auto') });
    try {
      expect((await new AgentClient(auto.url, token).health()).runtime).to.equal('process');
    } finally {
      await auto.close();
    }
    let failure: unknown;
    await startAgent({ token, runtime: 'docker', dockerHost, workDir: join(scratch, 'docker') }).catch((error: unknown) => { failure = error; });
    expect((failure as Error).message).to.equal(`no Docker Engine API answers at ${dockerHost}`);
  });

  it('runs commands with the orchestrator variables, the spec env and the uploaded files, without the agent\'s secrets', async () => {
    process.env.ORCHESTRATOR_AGENT_TOKEN = token;
    process.env.ORCHESTRATOR_DATABASE_URL = 'postgres://user:password@127.0.0.1/db';
    process.env.AGENT_TEST_INHERITED = 'inherited';
    const job = submission({
      runName: 'train-7',
      gpus: 3,
      env: { GREETING: 'hello world' },
      workingDir: 'project',
      files: [
        { path: 'data/input.txt', contentBase64: base64('line from a file\n') },
        { path: 'run.sh', contentBase64: base64('#!/bin/sh\necho "script ran in $(pwd)"\n'), mode: 0o755 },
        { path: '../beside/config.txt', contentBase64: base64('beside the working directory') },
      ],
      commands: [
        'echo "gpus=$ORCHESTRATOR_GPUS_NUM run=$ORCHESTRATOR_RUN_NAME greeting=$GREETING"',
        'echo "token=${ORCHESTRATOR_AGENT_TOKEN:-absent} database=${ORCHESTRATOR_DATABASE_URL:-absent} other=$AGENT_TEST_INHERITED"',
        'cat data/input.txt',
        './run.sh',
      ],
    });
    try {
      await client.submit(job);
      await waitForState(client, job.jobId, ['exited']);
    } finally {
      delete process.env.ORCHESTRATOR_AGENT_TOKEN;
      delete process.env.ORCHESTRATOR_DATABASE_URL;
      delete process.env.AGENT_TEST_INHERITED;
    }
    const lines = (await collectLogs(client, job.jobId)).map((entry) => entry.text);
    expect(lines[0]).to.equal('gpus=3 run=train-7 greeting=hello world');
    expect(lines[1]).to.equal('token=absent database=absent other=inherited');
    expect(lines[2]).to.equal('line from a file');
    expect(lines[3]).to.match(/^script ran in \/.*\/project$/);
    expect(readFileSync(join(agent.workDir, 'jobs', job.jobId, 'work', 'beside', 'config.txt'), 'utf8')).to.equal('beside the working directory');
    const status = await client.job(job.jobId);
    expect(status).to.include({ state: 'exited', exitCode: 0 });
    expect(Date.parse(status.startedAt!)).to.be.at.most(Date.parse(status.finishedAt!));
  });

  it('records exit codes and stops at the first failing command', async () => {
    const failing = submission({ commands: ['echo first', 'exit 3', 'echo never'] });
    const passing = submission({ commands: ['echo ok'] });
    await client.submit(failing);
    await client.submit(passing);
    const failed = await waitForState(client, failing.jobId, ['exited']);
    expect(failed.exitCode).to.equal(3);
    expect((await collectLogs(client, failing.jobId)).map((entry) => entry.text)).to.deep.equal(['first']);
    expect((await waitForState(client, passing.jobId, ['exited'])).exitCode).to.equal(0);
  });

  it('runs the commands in the job\'s shell, or passes each to its entrypoint as one argument', async () => {
    const bash = submission({ shell: '/bin/bash', commands: ['[[ -n "$BASH_VERSION" ]] && echo "in bash"'] });
    const entrypoint = submission({ entrypoint: ['printf', '<%s>\\n'], commands: ['one two', '$HOME'] });
    const missing = submission({ shell: '/no/such/shell', commands: ['true'] });
    for (const job of [bash, entrypoint, missing]) await client.submit(job);
    expect((await collectLogs(client, bash.jobId)).map((entry) => entry.text)).to.deep.equal(['in bash']);
    expect((await collectLogs(client, entrypoint.jobId)).map((entry) => entry.text)).to.deep.equal(['<one two>', '<$HOME>']);
    expect((await waitForState(client, missing.jobId, ['failed'])).reason).to.equal('could not start /no/such/shell: spawn /no/such/shell ENOENT');
  });

  it('tags stdout and stderr, numbers entries from 1 and flushes a trailing partial line', async () => {
    const job = submission({ commands: ['echo out', 'echo err >&2', 'sleep 0.1', 'printf "no newline"'] });
    await client.submit(job);
    const entries = await collectLogs(client, job.jobId);
    expect(entries.map((entry) => entry.seq)).to.deep.equal([1, 2, 3]);
    expect(entries.map((entry) => [entry.stream, entry.text])).to.have.deep.members([
      ['stdout', 'out'], ['stderr', 'err'], ['stdout', 'no newline'],
    ]);
    expect(entries[2]).to.include({ stream: 'stdout', text: 'no newline' });
    for (const entry of entries) expect(new Date(entry.ts).toISOString()).to.equal(entry.ts);
  });

  it('delivers 10 000 fast lines from both streams with no gap and no repeat', async () => {
    const job = submission({ commands: ['seq 1 10000', 'seq 1 3000 >&2'] });
    await client.submit(job);
    const entries = await collectLogs(client, job.jobId);
    expect(entries.map((entry) => entry.seq)).to.deep.equal(Array.from({ length: 13_000 }, (_, index) => index + 1));
    const stdout = entries.filter((entry) => entry.stream === 'stdout').map((entry) => entry.text);
    const stderr = entries.filter((entry) => entry.stream === 'stderr').map((entry) => entry.text);
    expect(stdout).to.deep.equal(Array.from({ length: 10_000 }, (_, index) => String(index + 1)));
    expect(stderr).to.deep.equal(Array.from({ length: 3000 }, (_, index) => String(index + 1)));
  });

  it('keeps a character whose bytes arrive in two writes whole', async () => {
    const job = submission({ commands: ["printf 'caf\\303'", 'sleep 0.2', "printf '\\251 ok\\n'"] });
    await client.submit(job);
    expect((await collectLogs(client, job.jobId)).map((entry) => entry.text)).to.deep.equal(['café ok']);
  });

  it('cuts an endless line into bounded entries and pages them by size, losing nothing', async () => {
    const job = submission({ commands: ["head -c 5000000 /dev/zero | tr '\\0' a"] });
    await client.submit(job);
    await waitForState(client, job.jobId, ['exited']);
    const firstPage = await client.logs(job.jobId, 0);
    expect(firstPage.entries.length).to.be.within(1, 300);
    expect(firstPage.finished).to.equal(false);
    const entries = await collectLogs(client, job.jobId);
    expect(entries.every((entry) => entry.text.length <= 16_384)).to.equal(true);
    expect(entries.map((entry) => entry.text).join('')).to.equal('a'.repeat(5_000_000));
  });

  it('pages logs from any sequence number', async () => {
    const job = submission({ commands: ['seq 1 20'] });
    await client.submit(job);
    await waitForState(client, job.jobId, ['exited']);
    const page = await client.logs(job.jobId, 15);
    expect(page.entries.map((entry) => entry.text)).to.deep.equal(['16', '17', '18', '19', '20']);
    expect(page).to.include({ next: 20, finished: true });
    const beyond = await client.logs(job.jobId, 20, 5000);
    expect(beyond).to.deep.equal({ entries: [], next: 20, finished: true });
  });

  it('answers many jobs\' states and new lines in one call, each after its own cursor, and names the jobs it does not know', async () => {
    const done = submission({ commands: ['seq 1 5'] });
    const printing = submission({ commands: ['echo first', 'sleep 30'] });
    await client.submit(done);
    await client.submit(printing);
    await waitForState(client, done.jobId, ['exited']);
    await waitForLine(client, printing.jobId, 'first');
    const texts = (jsonLines: string) => jsonLines.split('\n').map((line) => JSON.parse(line).text);
    const answer = await client.watchJobs([{ jobId: done.jobId, after: 2 }, { jobId: printing.jobId, after: 0 }, { jobId: 'no-such-job', after: 7 }]);
    const [exited, running, unknown] = answer!.jobs;
    expect(exited!.status).to.include({ jobId: done.jobId, state: 'exited', exitCode: 0 });
    expect(exited!.log).to.include({ first: 3, next: 5, finished: true, more: false });
    expect(texts(exited!.log.jsonLines)).to.deep.equal(['3', '4', '5']);
    expect(running!.status).to.include({ jobId: printing.jobId, state: 'running', forwarding: 0 });
    expect(running!.log).to.include({ first: 1, next: 1, finished: false, more: false });
    expect(texts(running!.log.jsonLines)).to.deep.equal(['first']);
    expect(unknown).to.deep.include({ jobId: 'no-such-job', status: null });
    const again = await client.watchJobs([{ jobId: printing.jobId, after: 1 }]);
    expect(again!.jobs[0]!.log).to.include({ jsonLines: '', next: 1, more: false });
    await client.stop(printing.jobId, { abort: true });

    const refused = await fetch(`${agent.url}/api/jobs/watch`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{"jobs":[{"jobId":"x"}]}' });
    expect(refused.status).to.equal(422);
    expect((await refused.json()).error.code).to.equal('invalid_request');
  });

  it('holds a changes call until one of the jobs leaves the state the caller saw, then names it; answers none after the wait', async () => {
    const ending = submission({ commands: ['sleep 0.8'] });
    const lasting = submission({ commands: ['sleep 30'] });
    for (const job of [ending, lasting]) await client.submit(job);
    for (const job of [ending, lasting]) await waitForState(client, job.jobId, ['running']);
    const started = Date.now();
    const changes = await client.jobChanges([{ jobId: ending.jobId, state: 'running' }, { jobId: lasting.jobId, state: 'running' }], 10_000);
    expect(Date.now() - started, 'held until the job ended').to.be.within(300, 8000);
    expect(changes).to.deep.equal({ changed: [{ jobId: ending.jobId, state: 'exited' }] });

    const idleStart = Date.now();
    expect(await client.jobChanges([{ jobId: lasting.jobId, state: 'running' }], 400)).to.deep.equal({ changed: [] });
    expect(Date.now() - idleStart, 'the wait asked for').to.be.within(350, 3000);
    expect(await client.jobChanges([{ jobId: lasting.jobId, state: 'pending' }, { jobId: 'no-such-job', state: 'running' }], 10_000))
      .to.deep.equal({ changed: [{ jobId: lasting.jobId, state: 'running' }, { jobId: 'no-such-job', state: null }] });

    const stopping = client.jobChanges([{ jobId: lasting.jobId, state: 'running' }], 10_000);
    await client.stop(lasting.jobId, { abort: true });
    expect(await stopping).to.deep.equal({ changed: [{ jobId: lasting.jobId, state: 'stopped' }] });
    const refused = await fetch(`${agent.url}/api/jobs/changes`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: '{"jobs":[],"waitMs":60000}' });
    expect(refused.status).to.equal(422);
  });

  it('pages many jobs\' lines by size in one call: a job past the page says there is more, and nothing is lost', async () => {
    const long = submission({ commands: ["head -c 5000000 /dev/zero | tr '\\0' a"] });
    const short = submission({ commands: ['seq 1 3'] });
    for (const job of [long, short]) await client.submit(job);
    for (const job of [long, short]) await waitForState(client, job.jobId, ['exited']);
    const cursors = new Map([[long.jobId, 0], [short.jobId, 0]]);
    const lines = new Map<string, string[]>([[long.jobId, []], [short.jobId, []]]);
    let calls = 0;
    for (let more = true; more; calls++) {
      const answer = await client.watchJobs([...cursors].map(([jobId, after]) => ({ jobId, after })));
      expect(answer!.jobs.reduce((bytes, job) => bytes + job.log.jsonLines.length, 0)).to.be.at.most(4.1 * 1024 * 1024);
      for (const { jobId, log } of answer!.jobs) {
        if (log.jsonLines !== '') lines.get(jobId)!.push(...log.jsonLines.split('\n').map((line) => JSON.parse(line).text as string));
        cursors.set(jobId, log.next);
      }
      more = answer!.jobs.some((job) => job.log.more);
    }
    expect(calls).to.be.above(1);
    expect(lines.get(long.jobId)!.join('')).to.equal('a'.repeat(5_000_000));
    expect(lines.get(short.jobId)).to.deep.equal(['1', '2', '3']);
  });

  it('long-polls: holds the request until a line arrives, and returns empty after the wait', async () => {
    const job = submission({ commands: ['sleep 0.6', 'echo late', 'sleep 5'] });
    await client.submit(job);
    const started = Date.now();
    const page = await client.logs(job.jobId, 0, 10_000);
    const waited = Date.now() - started;
    expect(page.entries.map((entry) => entry.text)).to.deep.equal(['late']);
    expect(waited).to.be.within(400, 5000);
    expect(page.finished).to.equal(false);

    const idleStart = Date.now();
    const idle = await client.logs(job.jobId, page.next, 300);
    expect(Date.now() - idleStart).to.be.within(250, 2000);
    expect(idle).to.deep.equal({ entries: [], next: page.next, finished: false });
    await client.stop(job.jobId, { abort: true });
  });

  it('stops gracefully: SIGTERM reaches the job, which may finish its work', async () => {
    const job = submission({ commands: ['trap "echo got TERM; exit 0" TERM; echo ready; while true; do sleep 0.05; done'] });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
    await client.stop(job.jobId, { graceSeconds: 5 });
    const status = await waitForState(client, job.jobId, ['stopped'], 4000);
    expect(status.exitCode).to.equal(0);
    const stdout = (await collectLogs(client, job.jobId)).filter((entry) => entry.stream === 'stdout');
    expect(stdout.map((entry) => entry.text)).to.deep.equal(['ready', 'got TERM']);
  });

  it('kills after the grace period a job that ignores SIGTERM, with every process it started', async () => {
    const pidFile = join(scratch, 'background.pid');
    const job = submission({ commands: [`trap "" TERM; sleep 300 & echo $! > ${pidFile}; echo ready; while true; do sleep 0.05; done`] });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
    const background = Number(readFileSync(pidFile, 'utf8'));
    expect(processAlive(background)).to.equal(true);
    const stopAt = Date.now();
    await client.stop(job.jobId, { graceSeconds: 1 });
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect((await client.job(job.jobId)).state).to.equal('running');
    const status = await waitForState(client, job.jobId, ['stopped'], 5000);
    expect(Date.now() - stopAt).to.be.at.least(900);
    expect(status.exitCode).to.equal(137);
    expect(processAlive(background)).to.equal(false);
  });

  it('ends a job with its shell, and with it the processes that left its group (setsid, nohup)', async () => {
    const pidFile = join(scratch, 'escaped.pid');
    const job = submission({ commands: [[
      `setsid sh -c 'echo $$ >> ${pidFile}; exec sleep 30' > /dev/null 2>&1 &`,
      `nohup sh -c 'echo $$ >> ${pidFile}; exec sleep 31' > /dev/null 2>&1 &`,
      'sleep 0.2; echo shell done',
    ].join('\n')] });
    await client.submit(job);
    const status = await waitForState(client, job.jobId, ['exited'], 6000);
    expect(status.exitCode).to.equal(0);
    const escaped = readFileSync(pidFile, 'utf8').trim().split('\n').map(Number);
    expect(escaped).to.have.length(2);
    expect(escaped.filter(processAlive), 'processes left after the job ended').to.deep.equal([]);
    expect((await collectLogs(client, job.jobId)).map((entry) => entry.text)).to.deep.equal(['shell done']);
  });

  it('ends a job with its shell even when a process that shed its marker holds the output open', async () => {
    const pidFile = join(scratch, 'unmarked.pid');
    const job = submission({ commands: [`env -u ORCHESTRATOR_JOB_MARKER setsid sh -c 'echo $$ > ${pidFile}; exec sleep 30' & sleep 0.2; echo shell done`] });
    await client.submit(job);
    const status = await waitForState(client, job.jobId, ['exited'], 6000);
    process.kill(Number(readFileSync(pidFile, 'utf8')), 'SIGKILL');
    expect(status.exitCode).to.equal(0);
    expect((await collectLogs(client, job.jobId)).map((entry) => entry.text)).to.deep.equal(['shell done']);
  });

  it('stops gracefully the processes that left its group too: SIGTERM reaches them first', async () => {
    const termFile = join(scratch, 'escaped-term.txt');
    const job = submission({ commands: [
      `setsid sh -c 'trap "echo got TERM > ${termFile}; exit 0" TERM; while true; do sleep 0.05; done' > /dev/null 2>&1 &`
      + ' trap "" TERM; sleep 0.2; echo ready; while true; do sleep 0.05; done',
    ] });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
    await client.stop(job.jobId, { graceSeconds: 1 });
    const status = await waitForState(client, job.jobId, ['stopped'], 5000);
    expect(status.exitCode).to.equal(137);
    expect(readFileSync(termFile, 'utf8')).to.equal('got TERM\n');
  });

  it('aborts at once with SIGKILL', async () => {
    const job = submission({ commands: ['echo ready', 'sleep 300'] });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
    const stopAt = Date.now();
    await client.stop(job.jobId, { abort: true, graceSeconds: 60 });
    const status = await waitForState(client, job.jobId, ['stopped'], 3000);
    expect(Date.now() - stopAt).to.be.below(2000);
    expect(status.exitCode).to.equal(137);
    const again = await client.stop(job.jobId);
    expect(again).to.deep.equal(status);
  });

  it('treats a second submission of a job id as a no-op that returns its status', async () => {
    const counter = join(scratch, 'runs.txt');
    const job = submission({ commands: [`echo run >> ${counter}`] });
    const first = await fetch(`${agent.url}/api/jobs`, {
      method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(job),
    });
    expect(first.status).to.equal(201);
    await waitForState(client, job.jobId, ['exited']);
    const second = await fetch(`${agent.url}/api/jobs`, {
      method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify({ ...job, commands: ['exit 9'] }),
    });
    expect(second.status).to.equal(200);
    expect(await second.json()).to.include({ jobId: job.jobId, state: 'exited', exitCode: 0 });
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(readFileSync(counter, 'utf8')).to.equal('run\n');
  });

  it('marks a job failed with a reason when it cannot start', async () => {
    const job = submission({
      files: [{ path: 'data', contentBase64: base64('a file') }, { path: 'data/inside.txt', contentBase64: base64('x') }],
      commands: ['echo never'],
    });
    await client.submit(job);
    const status = await waitForState(client, job.jobId, ['failed']);
    expect(status.reason).to.equal('could not prepare the working directory: "data/inside.txt" goes through data, which is not a directory');
    const page = await client.logs(job.jobId, 0, 5000);
    expect(page).to.deep.equal({ entries: [], next: 0, finished: true });
  });

  it('removes a finished job and its files, and refuses to remove a running one', async () => {
    const job = submission({ commands: ['echo ready', 'sleep 300'] });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
    await expectAgentError(client.remove(job.jobId), 409, 'job_running');
    await client.stop(job.jobId, { abort: true });
    await waitForState(client, job.jobId, ['stopped']);
    const jobDir = join(agent.workDir, 'jobs', job.jobId);
    expect(existsSync(jobDir)).to.equal(true);
    await client.remove(job.jobId);
    expect(existsSync(jobDir)).to.equal(false);
    await expectAgentError(client.job(job.jobId), 404, 'job_not_found');
    expect((await client.health()).jobs).to.not.include(job.jobId);
  });

  it('answers 401 without the right bearer token', async () => {
    const wrong = new AgentClient(agent.url, `${token}x`);
    await expectAgentError(wrong.health(), 401, 'unauthorized');
    const bare = await fetch(`${agent.url}/api/health`);
    expect(bare.status).to.equal(401);
    expect(await bare.json()).to.deep.equal({ error: { code: 'unauthorized', message: 'a valid bearer token is required' } });
  });

  it('answers 404 for unknown jobs and routes in the error shape', async () => {
    const error = await expectAgentError(client.job('no-such-job'), 404, 'job_not_found');
    expect(error.message).to.include('no job no-such-job');
    await expectAgentError(client.logs('no-such-job', 0), 404, 'job_not_found');
    await expectAgentError(client.stop('no-such-job'), 404, 'job_not_found');
    await expectAgentError(client.remove('no-such-job'), 404, 'job_not_found');
    const route = await fetch(`${agent.url}/api/nothing-here`, { headers: { authorization: `Bearer ${token}` } });
    expect(route.status).to.equal(404);
    expect((await route.json() as { error: { code: string } }).error.code).to.equal('not_found');
  });

  it('answers 422 with details for invalid submissions, stop requests and query parameters', async () => {
    const post = (path: string, body: string) => fetch(`${agent.url}${path}`, {
      method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body,
    });
    const missing = await post('/api/jobs', JSON.stringify({ jobId: 'x', runName: 'r' }));
    expect(missing.status).to.equal(422);
    const body = await missing.json() as { error: { code: string; details: { path: string }[] } };
    expect(body.error.code).to.equal('invalid_request');
    expect(body.error.details.map((detail) => detail.path)).to.include.members(['/commands', '/env']);

    const traversal = await post('/api/jobs', JSON.stringify(submission({ jobId: '../escape' })));
    expect(traversal.status).to.equal(422);
    const notBase64 = await post('/api/jobs', JSON.stringify(submission({ files: [{ path: 'a', contentBase64: 'not base64!' }] })));
    expect(notBase64.status).to.equal(422);
    const malformed = await post('/api/jobs', '{"jobId":');
    expect(malformed.status).to.equal(400);
    expect((await malformed.json() as { error: { code: string } }).error.code).to.equal('invalid_json');

    const job = submission({ commands: ['true'] });
    await client.submit(job);
    expect((await post(`/api/jobs/${job.jobId}/stop`, JSON.stringify({ graceSeconds: -1 }))).status).to.equal(422);
    await expectAgentError(client.logs(job.jobId, -1), 422, 'invalid_request');
  });

  it('reports CPU and memory from /proc and the GPUs', async () => {
    const metrics = await client.metrics();
    expect(metrics.cpuPercent).to.be.within(0, 100);
    expect(metrics.memoryTotalMib).to.be.greaterThan(0);
    expect(metrics.memoryUsedMib).to.be.within(1, metrics.memoryTotalMib);
    if (!hasNvidiaSmi()) {
      expect(metrics.gpus).to.deep.equal([
        { index: 0, name: 'A10G', utilizationPercent: 0, memoryUsedMib: 0, memoryTotalMib: 24 * 1024 },
        { index: 1, name: 'A10G', utilizationPercent: 0, memoryUsedMib: 0, memoryTotalMib: 24 * 1024 },
      ]);
    }
  });

  it("keeps the samples it took in the background while a job ran, for that job, behind its token", async () => {
    const job = submission({ commands: ['sleep 30'] });
    await client.submit(job);
    const started = Date.parse((await waitForState(client, job.jobId, ['running'])).startedAt!);
    let past: Awaited<ReturnType<AgentClient['metricsHistory']>> = [];
    for (const deadline = Date.now() + 15_000; past.length < 2 && Date.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      past = await client.metricsHistory(job.jobId);
    }
    expect(past.length, 'two samples that nobody asked for').to.be.at.least(2);
    expect(past.every((sample) => Date.parse(sample.ts) >= started && sample.memoryUsedMib > 0)).to.equal(true);
    expect(past.map((sample) => sample.ts)).to.deep.equal(past.map((sample) => sample.ts).sort());
    await expectAgentError(client.metricsHistory('no-such-job'), 404, 'job_not_found');
    await expectAgentError(new AgentClient(agent.url, `${token}x`).metricsHistory(job.jobId), 401, 'unauthorized');
    await client.stop(job.jobId, { abort: true });
  });

  describe('client failures', () => {
    let silent: Server;

    before(async () => {
      silent = createServer(() => undefined);
      await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    });

    after(() => new Promise<void>((resolve) => {
      silent.close(() => resolve());
      for (const socket of silentSockets) socket.destroy();
    }));

    const silentSockets: import('node:net').Socket[] = [];

    it('raises AgentUnreachableError when nothing listens', async () => {
      const closed = createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const { port } = closed.address() as import('node:net').AddressInfo;
      await new Promise((resolve) => closed.close(resolve));
      const error = await new AgentClient(`http://127.0.0.1:${port}`, token).health().catch((failure: unknown) => failure);
      expect(error).to.be.instanceOf(AgentUnreachableError);
      expect((error as Error).message).to.include('ECONNREFUSED');
    });

    it('raises AgentUnreachableError when the agent does not answer in time', async () => {
      silent.on('connection', (socket) => silentSockets.push(socket));
      const { port } = silent.address() as import('node:net').AddressInfo;
      const started = Date.now();
      const error = await new AgentClient(`http://127.0.0.1:${port}`, token, { timeoutMs: 200 }).health().catch((failure: unknown) => failure);
      expect(error).to.be.instanceOf(AgentUnreachableError);
      expect((error as Error).message).to.include('no answer within 200 ms');
      expect(Date.now() - started).to.be.below(2000);
    });
  });
});
