import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { JobFile, JobSubmission } from '../api/agent.js';
import type { Run } from '../api/objects.js';
import { AgentClient } from '../agent/client.js';
import { JobLog } from '../agent/job-log.js';
import { ProcessRuntime } from '../agent/process-runtime.js';
import { JobStartError } from '../agent/runtime.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { base64, collectLogs, randomToken, submission, waitForState } from './helpers/agent-jobs.js';
import { makeHome, releaseInstances, runCli, show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { startPodmanAgent, TEST_IMAGE, type PodmanAgent } from './helpers/podman.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const TASK = { type: 'task', commands: ['true'] };

/** Every file under `dir`, as paths relative to it. */
function filesUnder(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).sort();
}

for (const kind of DATABASE_KINDS) {
  describe(`files of a run through the HTTP API (${kind})`, function () {
    this.timeout(60_000);
    let server: TestServer;
    let outside: string;

    const apply = (body: unknown) => server.api('POST', '/api/projects/main/runs/apply', body);
    const runCount = async () => ((await server.api('GET', '/api/projects/main/runs?all=true')).body as Run[]).length;
    const finished = (name: string) => eventually(async () => {
      const run = (await server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
      return ['done', 'failed', 'terminated'].includes(run.status) ? run : null;
    }, 30_000, `run ${name} to end`);

    before(async function () {
      this.timeout(120_000);
      server = await startTestServer(kind, LOCAL_CONFIG);
      outside = mkdtempSync(join(tmpdir(), 'orch-outside-'));
      const fleet = await server.api('POST', '/api/projects/main/fleets/apply', { spec: { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..1' } });
      expect(fleet.status, JSON.stringify(fleet.body)).to.equal(201);
    });

    after(async function () {
      this.timeout(60_000);
      if (server) {
        await releaseInstances(server).catch(() => undefined);
        await server.stop();
      }
      if (outside) rmSync(outside, { recursive: true, force: true });
    });

    it('refuses each files entry that no runtime could write with a 422 naming it, and stores no run', async () => {
      const cases: [Record<string, unknown>, string, RegExp][] = [
        [{ path: '../../x', contentBase64: base64('x') }, 'files[0].path', /"\.\.\/\.\.\/x" leaves the working directory/],
        [{ path: 'a/../../x', contentBase64: base64('x') }, 'files[0].path', /"a\/\.\.\/\.\.\/x" leaves the working directory/],
        [{ path: '..', contentBase64: base64('x') }, 'files[0].path', /leaves the working directory/],
        [{ path: '', contentBase64: base64('x') }, 'files[0].path', /expected a non-empty string/],
        [{ path: 'a\u0000b', contentBase64: base64('x') }, 'files[0].path', /expected a path without NUL characters/],
        [{ path: 'a', contentBase64: base64('x'), mode: 0o10000 }, 'files[0].mode', /expected a file mode from 0 to 0o7777/],
        [{ path: 'a', contentBase64: base64('x'), mode: -1 }, 'files[0].mode', /expected a file mode/],
        [{ path: 'a', contentBase64: base64('x'), mode: 1.5 }, 'files[0].mode', /expected a file mode/],
        [{ path: 'a', contentBase64: 'not base64!' }, 'files[0].contentBase64', /expected base64/],
        [{ path: 'a', contentBase64: 'eA=' }, 'files[0].contentBase64', /expected base64/],
        [{ path: 'a', contentBase64: 'eA=A' }, 'files[0].contentBase64', /expected base64/],
        [{ path: 'a', contentBase64: base64('x'), owner: 'root' }, 'files[0].owner', /unknown field; expected one of path, contentBase64, mode/],
        [{ contentBase64: base64('x') }, 'files[0].path', /required field is missing/],
      ];
      for (const [entry, path, message] of cases) {
        const answer = await apply({ spec: TASK, files: [entry] });
        expect(answer.status, JSON.stringify(entry)).to.equal(422);
        expect(answer.body.error).to.have.keys('code', 'message', 'details');
        expect(answer.body.error.code).to.equal('invalid_spec');
        expect(answer.body.error.details.map((d: { path: string }) => d.path), JSON.stringify(entry)).to.deep.equal([path]);
        expect(answer.body.error.message, JSON.stringify(entry)).to.match(message);
      }
      const second = await apply({ spec: TASK, files: [{ path: 'ok', contentBase64: '' }, { path: '../x', contentBase64: '' }] });
      expect(second.body.error.details.map((d: { path: string }) => d.path)).to.deep.equal(['files[1].path']);
      for (const files of [{}, 'a', [1], [[]]]) expect((await apply({ spec: TASK, files })).status, JSON.stringify(files)).to.equal(422);
      expect(await runCount()).to.equal(0);
    });

    it('refuses a files list nested 10 000 levels deep with a 400, and the server stays up', async () => {
      const deep = `${'['.repeat(10_000)}${']'.repeat(10_000)}`;
      const response = await fetch(`${server.url}/api/projects/main/runs/apply`, {
        method: 'POST',
        headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' },
        body: `{"spec":{"type":"task","commands":["true"]},"files":[{"path":"a","contentBase64":"","x":${deep}}]}`,
      });
      expect(response.status).to.equal(400);
      const body = await response.json() as { error: { code: string; message: string } };
      expect(body.error).to.deep.equal({ code: 'bad_request', message: 'the body nests arrays and objects more than 64 levels deep' });
      expect(await runCount()).to.equal(0);
    });

    it('runs a file with mode 04755 as 0755, and fails a run with an absolute path on the process runtime, writing nothing there', async () => {
      const good = await apply({
        spec: { type: 'task', name: 'modes', commands: ['stat -c %a run.sh', './run.sh'] },
        files: [{ path: 'run.sh', contentBase64: base64('#!/bin/sh\necho ran\n'), mode: 0o4755 }],
      });
      expect(good.status, JSON.stringify(good.body)).to.equal(201);
      expect(await finished('modes')).to.include({ status: 'done' });
      const logs = (await server.api('GET', '/api/projects/main/runs/modes/logs')).body as { lines: { text: string }[] };
      expect(logs.lines.map((line) => line.text)).to.deep.equal(['755', 'ran']);

      const target = join(outside, 'etc', 'x');
      const absolute = await apply({ spec: { type: 'task', name: 'absolute', commands: ['echo never'] }, files: [{ path: target, contentBase64: base64('x') }] });
      expect(absolute.status, JSON.stringify(absolute.body)).to.equal(201);
      const run = await finished('absolute');
      expect(run.status).to.equal('failed');
      expect(run.statusMessage).to.equal(`could not prepare the working directory: the file ${JSON.stringify(target)} is an absolute path; the process runtime has no container, so give a path relative to the working directory`);
      expect(filesUnder(outside)).to.deep.equal([]);
    });
  });
}

describe('files of a job, directly against an agent (process runtime)', function () {
  this.timeout(30_000);
  let scratch: string;
  let outside: string;
  let agent: RunningAgent;
  let client: AgentClient;
  const token = randomToken();

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), 'files-confinement-'));
    outside = join(scratch, 'outside');
    mkdirSync(outside);
    agent = await startAgent({ token, runtime: 'process', instanceId: 'confinement-test', workDir: join(scratch, 'agent') });
    client = new AgentClient(agent.url, token);
  });

  after(async () => {
    await agent?.close();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  /** Submits a job that must fail before it starts; returns its reason. */
  async function refused(overrides: Partial<JobSubmission>): Promise<string> {
    const job = submission({ commands: [`touch ${join(outside, 'ran')}`], ...overrides });
    await client.submit(job);
    const status = await waitForState(client, job.jobId, ['failed', 'exited']);
    expect(status.state, JSON.stringify(overrides)).to.equal('failed');
    return status.reason!;
  }

  it('fails a job whose files or working directory lead out of its directory, naming the path, and writes nothing outside', async () => {
    const jobsDir = join(agent.workDir, 'jobs');
    const fromWork = join('..', '..', '..', '..', 'outside');
    const cases: [Partial<JobSubmission>, string][] = [
      [{ files: [{ path: join(outside, 'absolute.txt'), contentBase64: base64('x') }] }, `the file ${JSON.stringify(join(outside, 'absolute.txt'))} is an absolute path`],
      [{ files: [{ path: '../escape.txt', contentBase64: base64('x') }] }, 'the file "../escape.txt" leaves the job\'s directory'],
      [{ files: [{ path: `${fromWork}/relative.txt`, contentBase64: base64('x') }] }, `the file ${JSON.stringify(`${fromWork}/relative.txt`)} leaves the job's directory`],
      [{ files: [{ path: 'a/../../escape.txt', contentBase64: base64('x') }] }, 'the file "a/../../escape.txt" leaves the job\'s directory'],
      [{ workingDir: 'project', files: [{ path: '../../escape.txt', contentBase64: base64('x') }] }, 'the file "../../escape.txt" leaves the job\'s directory'],
      [{ workingDir: outside }, `the working directory ${JSON.stringify(outside)} is an absolute path`],
      [{ workingDir: fromWork }, `the working directory ${JSON.stringify(fromWork)} leaves the job's directory`],
      [{ workingDir: '..' }, 'the working directory ".." leaves the job\'s directory'],
    ];
    for (const [overrides, reason] of cases) {
      expect(await refused(overrides)).to.include(`could not prepare the working directory: ${reason}`);
    }
    expect(filesUnder(outside)).to.deep.equal([]);
    for (const job of readdirSync(jobsDir)) {
      expect(readdirSync(join(jobsDir, job)).filter((name) => name !== 'log.jsonl' && name !== 'work'), job).to.deep.equal([]);
    }
  });

  it('keeps only the permission bits of a file\'s mode: 04755 ends up 0755', async () => {
    const job = submission({
      files: [
        { path: 'setuid.sh', contentBase64: base64('#!/bin/sh\necho ran\n'), mode: 0o4755 },
        { path: 'sticky/dir.txt', contentBase64: base64('x'), mode: 0o7777 },
        { path: 'plain.txt', contentBase64: base64('x') },
      ],
      commands: ['./setuid.sh'],
    });
    await client.submit(job);
    expect((await waitForState(client, job.jobId, ['exited', 'failed'])).exitCode).to.equal(0);
    const work = join(agent.workDir, 'jobs', job.jobId, 'work');
    expect(statSync(join(work, 'setuid.sh')).mode & 0o7777).to.equal(0o755);
    expect(statSync(join(work, 'sticky', 'dir.txt')).mode & 0o7777).to.equal(0o777);
    expect(statSync(join(work, 'plain.txt')).mode & 0o7777).to.equal(0o644);
  });

  it('refuses a submission whose files entries are malformed with a 422', async () => {
    const post = (files: unknown[]) => fetch(`${agent.url}/api/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ ...submission(), files }),
    });
    for (const entry of [
      { path: '', contentBase64: '' }, { path: 'a\u0000', contentBase64: '' }, { path: 'a', contentBase64: 'eA=' },
      { path: 'a', contentBase64: '', mode: 0o10000 }, { path: 'a', contentBase64: '', owner: 0 },
    ]) {
      const response = await post([entry]);
      expect(response.status, JSON.stringify(entry)).to.equal(422);
      expect((await response.json() as { error: { details: { path: string }[] } }).error.details[0]!.path).to.match(/^\/files\/0/);
    }
  });
});

describe('files of a job through a symbolic link (process runtime)', function () {
  this.timeout(20_000);
  let scratch: string;
  let outside: string;
  let jobDir: string;
  const runtime = new ProcessRuntime();

  beforeEach(() => {
    scratch = mkdtempSync(join(tmpdir(), 'files-symlink-'));
    outside = join(scratch, 'outside');
    jobDir = join(scratch, 'job');
    mkdirSync(outside);
    mkdirSync(join(jobDir, 'work'), { recursive: true });
  });

  afterEach(async () => {
    await runtime.shutdown();
    rmSync(scratch, { recursive: true, force: true });
  });

  /** Starts a job in `dir` the way the agent does; returns its output, or throws its JobStartError. */
  async function start(dir: string, files: JobFile[], commands: string[] = ['true']): Promise<string[]> {
    const log = new JobLog(join(scratch, `log-${randomUUID()}.jsonl`));
    const execution = await runtime.start({ submission: submission({ files, commands }), dir, log, pulling: () => undefined, cancelled: () => false });
    await execution.exited;
    log.close();
    const lines = log.read(0, 100).map((entry) => entry.text);
    log.dispose();
    return lines;
  }

  async function startError(files: JobFile[]): Promise<string> {
    try {
      await start(jobDir, files);
    } catch (error) {
      expect(error).to.be.instanceOf(JobStartError);
      return (error as Error).message;
    }
    throw new Error('expected the job not to start');
  }

  it('refuses a file path through a symbolic link to a directory outside, and writes nothing there', async () => {
    symlinkSync(outside, join(jobDir, 'work', 'link'));
    expect(await startError([{ path: 'link/deeper/x.txt', contentBase64: base64('x') }]))
      .to.equal('could not prepare the working directory: "link/deeper/x.txt" goes through the symbolic link link');
    symlinkSync(join(outside, 'deeper'), join(jobDir, 'work', 'dangling'));
    expect(await startError([{ path: 'dangling/x.txt', contentBase64: base64('x') }]))
      .to.equal('could not prepare the working directory: "dangling/x.txt" goes through the symbolic link dangling');
    expect(filesUnder(outside)).to.deep.equal([]);
  });

  it('replaces a symbolic link at a file\'s own place instead of writing through it', async () => {
    writeFileSync(join(outside, 'target.txt'), 'kept');
    symlinkSync(join(outside, 'target.txt'), join(jobDir, 'work', 'config.txt'));
    expect(await start(jobDir, [{ path: 'config.txt', contentBase64: base64('new') }], ['cat config.txt'])).to.deep.equal(['new']);
    expect(readFileSync(join(outside, 'target.txt'), 'utf8')).to.equal('kept');
    expect(statSync(join(jobDir, 'work', 'config.txt')).isFile()).to.equal(true);
  });

  it('works when the job\'s own directory is reached through a symbolic link', async () => {
    const linked = join(scratch, 'linked-job');
    symlinkSync(jobDir, linked);
    const output = await start(linked, [{ path: 'data/in.txt', contentBase64: base64('through a link') }], ['cat data/in.txt']);
    expect(output).to.deep.equal(['through a link']);
    expect(readFileSync(join(jobDir, 'work', 'data', 'in.txt'), 'utf8')).to.equal('through a link');
  });
});

describe('files of a run through the CLI', function () {
  this.timeout(30_000);
  let home: ReturnType<typeof makeHome>;
  let work: string;

  before(() => {
    home = makeHome();
    work = mkdtempSync(join(tmpdir(), 'orch-cli-files-'));
    // Nothing listens at this address: a request would fail with another message than the one expected.
    mkdirSync(join(home.home, '.orchestrator'));
    writeFileSync(join(home.home, '.orchestrator', 'config.yml'), 'projects:\n- name: main\n  url: http://127.0.0.1:9\n  token: unused\n  default: true\n');
    writeFileSync(join(work, 'x'), 'data');
  });

  after(() => {
    home?.remove();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('refuses a remote path that leads out of the working directory before sending anything, naming the file and the entry', async () => {
    writeFileSync(join(work, 'task.yml'), 'type: task\nname: out\nfiles:\n  - x:../../outside\ncommands: ["true"]\n');
    const result = await runCli(['apply', '-f', 'task.yml', '-y'], { home: home.home, cwd: work });
    expect(result.code, show(result)).to.equal(1);
    expect(result.stderr, show(result)).to.contain('task.yml:4:5: files[0]: invalid file mapping "x:../../outside": "../../outside" leaves the working directory');
    expect(result.stderr).to.contain('nothing was applied');
  });
});

describe('files of a job in a container (docker runtime, against Podman)', function () {
  this.timeout(60_000);
  let podman: PodmanAgent | undefined;
  let scratch: string;
  let client: AgentClient;

  before(async function () {
    this.timeout(600_000);
    podman = await startPodmanAgent('files-docker', 'agent');
    ({ scratch, client } = podman);
  });

  after(async () => {
    await podman?.stop();
  });

  it('puts an absolute path, and a relative one that climbs past /, inside the container and nowhere on the machine', async () => {
    const unique = `orch-files-${randomUUID()}`;
    const absolute = join(scratch, unique, 'absolute.txt');
    const job = submission({
      image: TEST_IMAGE,
      workingDir: '/work/dir',
      files: [
        { path: absolute, contentBase64: base64('absolute') },
        { path: `../../../../${unique}.txt`, contentBase64: base64('climbed') },
        { path: 'setuid.sh', contentBase64: base64('#!/bin/sh\necho ran\n'), mode: 0o4755 },
      ],
      commands: [`cat ${absolute}; echo`, `cat /${unique}.txt; echo`, 'stat -c %a setuid.sh', './setuid.sh'],
    });
    await client.submit(job);
    const lines = (await collectLogs(client, job.jobId)).map((entry) => entry.text);
    expect(lines).to.deep.equal(['absolute', 'climbed', '755', 'ran']);
    expect((await client.job(job.jobId)).exitCode).to.equal(0);
    expect(existsSync(absolute)).to.equal(false);
    expect(existsSync(join(scratch, unique))).to.equal(false);
    expect(existsSync(`/${unique}.txt`)).to.equal(false);
  });
});
