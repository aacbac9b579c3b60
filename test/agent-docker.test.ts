import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient } from '../agent/client.js';
import { dockerClient } from '../agent/docker-connection.js';
import { LABELS } from '../agent/docker-runtime.js';
import { removeInstanceContainers } from '../agent/instance-containers.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { base64, collectLogs, randomToken, submission, waitForLine, waitForState } from './helpers/agent-jobs.js';
import { ensurePodman, TEST_IMAGE } from './helpers/podman.js';
import { freePort } from './helpers/ports.js';

describe('agent (docker runtime, against Podman)', function () {
  this.timeout(30_000);
  let dockerHost: string;
  let scratch: string;
  let instanceId: string;
  let token: string;
  let agent: RunningAgent;
  let client: AgentClient;

  const containersOf = async (jobId: string) => dockerClient(dockerHost).listContainers({
    all: true, filters: { label: [`${LABELS.instanceId}=${instanceId}`, `${LABELS.jobId}=${jobId}`] },
  });

  before(async function () {
    this.timeout(600_000);
    dockerHost = await ensurePodman();
    scratch = mkdtempSync(join(tmpdir(), 'agent-docker-test-'));
    instanceId = `docker-test-${randomUUID().slice(0, 8)}`;
    token = randomToken();
    agent = await startAgent({ token, runtime: 'docker', dockerHost, instanceId, workDir: join(scratch, 'first') });
    client = new AgentClient(agent.url, token);
  });

  after(async () => {
    await agent?.close();
    if (dockerHost) await removeInstanceContainers(instanceId, dockerHost);
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it('chooses the docker runtime by itself when an engine answers', async () => {
    const auto = await startAgent({ token, runtime: 'auto', dockerHost, instanceId: `${instanceId}-auto`, workDir: join(scratch, 'auto') });
    try {
      expect((await new AgentClient(auto.url, token).health()).runtime).to.equal('docker');
    } finally {
      await auto.close();
    }
  });

  it('runs a job in a container: env, files, working directory, tagged logs and exit code', async () => {
    const job = submission({
      image: TEST_IMAGE,
      runName: 'docker-run',
      gpus: 0,
      env: { GREETING: 'hi there' },
      workingDir: '/work/dir',
      files: [
        { path: 'data/input.txt', contentBase64: base64('from a file\n') },
        { path: 'run.sh', contentBase64: base64('#!/bin/sh\necho "script in $(pwd)"\n'), mode: 0o755 },
        { path: '/etc/orchestrator/absolute.txt', contentBase64: base64('absolute') },
      ],
      commands: [
        'echo "run=$ORCHESTRATOR_RUN_NAME gpus=$ORCHESTRATOR_GPUS_NUM greeting=$GREETING"',
        'cat data/input.txt',
        './run.sh',
        'cat /etc/orchestrator/absolute.txt; echo',
        'echo "to stderr" >&2',
        'printf "partial"',
        'exit 4',
      ],
    });
    expect((await client.submit(job)).jobId).to.equal(job.jobId);
    const entries = await collectLogs(client, job.jobId);
    expect(entries.map((entry) => entry.seq)).to.deep.equal(entries.map((_, index) => index + 1));
    expect(entries.map((entry) => [entry.stream, entry.text])).to.deep.equal([
      ['stdout', 'run=docker-run gpus=0 greeting=hi there'],
      ['stdout', 'from a file'],
      ['stdout', 'script in /work/dir'],
      ['stdout', 'absolute'],
      ['stderr', 'to stderr'],
      ['stdout', 'partial'],
    ]);
    const status = await client.job(job.jobId);
    expect(status).to.include({ state: 'exited', exitCode: 4 });
    expect(status.startedAt).to.be.a('string');
    const [container] = await containersOf(job.jobId);
    expect(container!.Labels).to.include({ [LABELS.runName]: 'docker-run', [LABELS.instanceId]: instanceId });
  });

  it('publishes the job\'s ports on the agent\'s address', async () => {
    const port = await freePort();
    const job = submission({ image: TEST_IMAGE, ports: [port], commands: ['mkdir -p /www', 'echo served > /www/index.html', `echo ready`, `httpd -f -p ${port} -h /www`] });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'ready');
    const deadline = Date.now() + 10_000;
    let body = '';
    while (Date.now() < deadline) {
      body = await fetch(`http://127.0.0.1:${port}/index.html`).then((response) => response.text(), () => '');
      if (body) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(body).to.equal('served\n');
    await client.stop(job.jobId, { abort: true });
    await waitForState(client, job.jobId, ['stopped']);
  });

  it('stops a container gracefully and aborts another at once', async () => {
    const graceful = submission({ image: TEST_IMAGE, commands: ['trap "echo got TERM; exit 0" TERM; echo ready; while true; do sleep 0.1; done'] });
    const stubborn = submission({ image: TEST_IMAGE, commands: ['echo ready', 'sleep 300'] });
    await client.submit(graceful);
    await client.submit(stubborn);
    await waitForLine(client, graceful.jobId, 'ready');
    await waitForLine(client, stubborn.jobId, 'ready');

    await client.stop(graceful.jobId, { graceSeconds: 10 });
    const abortAt = Date.now();
    await client.stop(stubborn.jobId, { abort: true });
    const aborted = await waitForState(client, stubborn.jobId, ['stopped'], 5000);
    expect(Date.now() - abortAt).to.be.below(4000);
    expect(aborted.exitCode).to.equal(137);

    const stopped = await waitForState(client, graceful.jobId, ['stopped'], 5000);
    expect(stopped.exitCode).to.equal(0);
    expect((await collectLogs(client, graceful.jobId)).map((entry) => entry.text)).to.deep.equal(['ready', 'got TERM']);
  });

  it('marks a job with a missing image failed, with the reason', async () => {
    const job = submission({ image: 'localhost/orchestrator-test:missing', commands: ['true'] });
    await client.submit(job);
    const status = await waitForState(client, job.jobId, ['failed'], 20_000);
    expect(status.reason).to.match(/^could not pull image localhost\/orchestrator-test:missing from registry localhost: /);
    expect(await containersOf(job.jobId)).to.have.length(0);
  });

  it('removes the container of a finished job on DELETE', async () => {
    const job = submission({ image: TEST_IMAGE, commands: ['echo done'] });
    await client.submit(job);
    await waitForState(client, job.jobId, ['exited']);
    expect(await containersOf(job.jobId)).to.have.length(1);
    await client.remove(job.jobId);
    expect(await containersOf(job.jobId)).to.have.length(0);
  });

  it('re-attaches a restarted agent to its running container by labels, with the full log', async () => {
    const job = submission({ image: TEST_IMAGE, commands: ['echo before', 'while [ ! -e /tmp/go ]; do sleep 0.1; done', 'echo after', 'exit 5'] });
    await client.submit(job);
    await waitForLine(client, job.jobId, 'before');
    await agent.close();

    agent = await startAgent({ token, runtime: 'docker', dockerHost, instanceId, workDir: join(scratch, 'second') });
    client = new AgentClient(agent.url, token);
    expect((await client.health()).jobs).to.include(job.jobId);
    expect((await client.job(job.jobId)).state).to.equal('running');
    expect((await client.submit(job)).state).to.equal('running');
    expect(await containersOf(job.jobId)).to.have.length(1);

    const [container] = await containersOf(job.jobId);
    const exec = await dockerClient(dockerHost).getContainer(container!.Id).exec({ Cmd: ['touch', '/tmp/go'] });
    await exec.start({ Detach: true });

    const entries = await collectLogs(client, job.jobId);
    expect(entries.map((entry) => [entry.seq, entry.text])).to.deep.equal([[1, 'before'], [2, 'after']]);
    expect(await client.job(job.jobId)).to.include({ state: 'exited', exitCode: 5 });
  });

  it('removes every container of an instance when it ends for good', async () => {
    const running = submission({ image: TEST_IMAGE, commands: ['echo ready', 'sleep 300'] });
    await client.submit(running);
    await waitForLine(client, running.jobId, 'ready');
    const docker = dockerClient(dockerHost);
    const before = await docker.listContainers({ all: true, filters: { label: [`${LABELS.instanceId}=${instanceId}`] } });
    expect(before.length).to.be.at.least(2);
    expect(await removeInstanceContainers(instanceId, dockerHost)).to.equal(before.length);
    expect(await docker.listContainers({ all: true, filters: { label: [`${LABELS.instanceId}=${instanceId}`] } })).to.have.length(0);
  });
});
