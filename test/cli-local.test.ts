import { expect } from 'chai';
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { execFile } from 'node:child_process';
import type { Run } from '../api/objects.js';
import { addProject, CLI_MAIN, makeHome, releaseInstances, runCli, show, startCli } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { freePort } from './helpers/ports.js';
import { LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const REPO = resolve(import.meta.dirname, '..');
const run = promisify(execFile);

// The cases run in order, as a user would type them: the quickstart adds the project and the local fleet that the others use.
for (const kind of DATABASE_KINDS) {
  describe(`orchestrator CLI on the local backend (${kind})`, function () {
    this.timeout(90_000);
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    let work: string;
    const cli = (args: string[], cwd = work) => runCli(args, { home: home.home, cwd });
    const task = (name: string, body: string) => {
      const file = join(work, `${name}.yml`);
      writeFileSync(file, `type: task\nname: ${name}\n${body}`);
      return file;
    };
    const runs = async (): Promise<Run[]> => {
      const result = await cli(['ps', '-a', '--json']);
      expect(result.code, show(result)).to.equal(0);
      return JSON.parse(result.stdout) as Run[];
    };

    before(async function () {
      this.timeout(120_000);
      server = await startTestServer(kind, LOCAL_CONFIG);
      home = makeHome();
      work = mkdtempSync(join(tmpdir(), 'orch-cli-work-'));
    });

    after(async function () {
      this.timeout(60_000);
      if (server) {
        await releaseInstances(server).catch(() => undefined);
        await server.stop();
      }
      home?.remove();
      if (work) rmSync(work, { recursive: true, force: true });
    });

    it('runs the quickstart: project add, the local fleet, then hello with its plan, statuses and logs', async () => {
      const added = await addProject(home.home, server.url);
      expect(added.stdout).to.contain('project main');
      expect(added.stdout).to.contain('as the default');
      const config = join(home.home, '.orchestrator', 'config.yml');
      expect(statSync(config).mode & 0o777).to.equal(0o600);

      const fleet = await cli(['apply', '-f', 'examples/fleets/local.yml', '-y'], REPO);
      expect(fleet.code, show(fleet)).to.equal(0);
      expect(fleet.stderr).to.contain('fleet local: create');
      expect(fleet.stdout).to.match(/local\s+-\s+local/);

      const hello = await cli(['apply', '-f', 'examples/tasks/hello.yml', '-y'], REPO);
      expect(hello.code, show(hello)).to.equal(0);
      expect(hello.stderr).to.contain('task hello: create');
      expect(hello.stderr).to.match(/fleets\s+local/);
      expect(hello.stderr).to.match(/^submitted: /m);
      expect(hello.stderr).to.match(/^done: /m);
      expect(hello.stdout).to.contain('Hello from ');
      expect(hello.stdout).to.contain('GPUs on this machine: 0');
      expect(hello.stderr, 'a task that lives a moment is not one to ssh into').not.to.contain('To connect via SSH');

      const ps = await cli(['ps', '-a']);
      expect(ps.stdout).to.match(/hello\s+task\s+done/);
      const logs = await cli(['logs', 'hello']);
      expect(logs.code, show(logs)).to.equal(0);
      expect(logs.stdout).to.contain('Hello from ');
      expect(logs.stdout).to.contain('GPUs on this machine: 0');
    });

    it('exits with the task\'s exit code and records it', async () => {
      const result = await cli(['apply', '-f', 'examples/tasks/exit-code.yml', '-y'], REPO);
      expect(result.code, show(result)).to.equal(3);
      expect(result.stdout).to.contain('about to fail');
      expect(result.stderr).to.contain('something went wrong');
      expect(result.stderr).to.match(/^failed: exited with code 3$/m);
      const run = (await runs()).find((r) => r.name === 'exit-code');
      expect(run).to.include({ status: 'failed', exitCode: 3 });
    });

    it('uploads task files, keeping relative paths or using the given place', async () => {
      const result = await cli(['apply', '-f', 'examples/tasks/files.yml', '-y'], REPO);
      expect(result.code, show(result)).to.equal(0);
      expect(result.stdout).to.contain('name: hello');
      expect(result.stdout).to.match(/^exit-code\.yml$/m);
    });

    it('leaves an unchanged fleet alone and shows what an update changes: down to one node, for the queue below', async () => {
      const same = await cli(['apply', '-f', 'examples/fleets/local.yml', '-y'], REPO);
      expect(same.code, show(same)).to.equal(0);
      expect(same.stderr).to.contain('fleet local: unchanged (generation 1)');
      expect(same.stderr).to.contain('fleet local is already up to date');
      const file = join(work, 'local-fleet.yml');
      writeFileSync(file, 'type: fleet\nname: local\nbackends: [local]\nnodes: 0..1\nidle_duration: 10m\n');
      const updated = await cli(['apply', '-f', file, '-y']);
      expect(updated.code, show(updated)).to.equal(0);
      expect(updated.stderr).to.contain('fleet local: update (generation 1 → 2)');
      expect(updated.stderr).to.match(/^  changes\s+nodes: 0\.\.4 → 0\.\.1\n\s+idle_duration: \(not set\) → 10m$/m);
      expect(updated.stderr).to.contain('fleet local: updated to generation 2');
    });

    it('queues a second task behind a full fleet and shows why and where it waits', async () => {
      const release = join(work, 'release-first');
      const first = startCli(['apply', '-f', task('first', `commands: ["echo first started", "until [ -f ${release} ]; do sleep 0.1; done"]\n`), '-y'], { home: home.home, cwd: work });
      await first.waitFor(/first started/);
      const second = await cli(['apply', '-f', task('second', 'commands: ["echo second ran"]\n'), '-y', '-d']);
      expect(second.code, show(second)).to.equal(0);
      expect(second.stdout.trim()).to.equal('second');

      const ps = await cli(['ps']);
      expect(ps.stdout).to.match(/first\s+task\s+running/);
      expect(ps.stdout).to.match(/second\s+task\s+submitted \(#1\).*maximum of 1 node/);

      writeFileSync(release, '');
      const firstResult = await first.done;
      expect(firstResult.code, show(firstResult)).to.equal(0);
      const followed = await cli(['logs', '-f', 'second']);
      expect(followed.code, show(followed)).to.equal(0);
      expect(followed.stdout).to.equal('second ran\n');
      expect((await runs()).find((r) => r.name === 'second')?.status).to.equal('done');
    });

    it('detaches on Ctrl-C; stop then ends the run and the log tail stays', async () => {
      const apply = startCli(['apply', '-f', task('sleeper', 'commands: ["echo before stop", "sleep 30"]\n'), '-y'], { home: home.home, cwd: work });
      await apply.waitFor(/before stop/);
      const detached = await apply.interrupt();
      expect(detached.code, show(detached)).to.equal(130);
      expect(detached.stderr).to.contain('orchestrator logs -f sleeper');
      expect(detached.stderr).to.contain('orchestrator stop sleeper');
      expect((await runs()).find((r) => r.name === 'sleeper')?.status).to.equal('running');

      const stop = await cli(['stop', 'sleeper']);
      expect(stop.code, show(stop)).to.equal(0);
      expect(stop.stdout).to.match(/^sleeper: terminated \(stopped_by_user\)/);
      const logs = await cli(['logs', 'sleeper']);
      expect(logs.stdout).to.equal('before stop\n');

      const deleted = await cli(['delete', 'sleeper']);
      expect(deleted.code, show(deleted)).to.equal(0);
      expect((await runs()).map((r) => r.name)).not.to.include('sleeper');
    });

    it('ends logs -f, after a detach, with the run\'s final status and the task\'s exit code, as an attached apply does', async () => {
      const release = join(work, 'release-sevens');
      const apply = startCli(['apply', '-f', task('sevens', `commands: ["echo before detach", "until [ -f ${release} ]; do sleep 0.1; done", "exit 7"]\n`), '-y'], { home: home.home, cwd: work });
      await apply.waitFor(/before detach/);
      const detached = await apply.interrupt();
      expect(detached.code, show(detached)).to.equal(130);
      expect(detached.stderr).to.contain('orchestrator logs -f sevens');
      const followed = startCli(['logs', '-f', 'sevens'], { home: home.home, cwd: work });
      await followed.waitFor(/before detach/);
      writeFileSync(release, '');
      const ended = await followed.done;
      expect(ended.code, show(ended)).to.equal(7);
      expect(ended.stdout).to.equal('before detach\n');
      expect(ended.stderr).to.match(/(^|\n)failed: exited with code 7\n$/);
    });

    it('cuts no line of ps or events written to a pipe; with $COLUMNS it cuts them to that width, unless --wide', async () => {
      const release = join(work, 'release-holder');
      const holder = startCli(['apply', '-f', task('holder', `commands: ["echo holding", "until [ -f ${release} ]; do sleep 0.1; done"]\n`), '-y'], { home: home.home, cwd: work });
      await holder.waitFor(/holding/);
      try {
        await wideLines();
      } finally {
        writeFileSync(release, '');
      }
      expect((await holder.done).code).to.equal(0);
    });

    async function wideLines(): Promise<void> {
      const name = 'a-task-whose-name-makes-every-line-wider';
      const queued = await cli(['apply', '-f', task(name, 'commands: ["true"]\n'), '-y', '-d']);
      expect(queued.code, show(queued)).to.equal(0);
      // The row of the run, its age left out, as it grows between two listings.
      // (The age column's width follows the longest age in the table, so the spaces around it go too.)
      const row = (text: string) => (text.split('\n').find((line) => line.startsWith('a-task-')) ?? '').replace(/\s+\d+[smhd] ago\s+/, ' ago ');
      const submitted = (text: string) => text.split('\n').find((line) => line.includes(`run/${name}`) && line.includes('Submitted')) ?? '';

      const ps = await cli(['ps', '-a']);
      expect(row(ps.stdout), ps.stdout).to.match(/\ssubmitted \(#1\)\s.*\swaiting: fleet local is at its maximum of 1 node: 1 busy$/);
      expect(row(ps.stdout).length).to.be.above(120);
      const events = await cli(['events']);
      expect(submitted(events.stdout), events.stdout).to.match(/\stask submitted \(.*\)$/);
      expect(ps.stdout + events.stdout).not.to.contain('…');

      const narrow = (args: string[]) => runCli(args, { home: home.home, cwd: work, env: { COLUMNS: '80' } });
      const cut = await narrow(['ps', '-a']);
      expect(row(cut.stdout)).to.have.length.at.most(80).and.to.contain('…');
      expect(row((await narrow(['ps', '-a', '--wide'])).stdout)).to.equal(row(ps.stdout));
      expect(submitted((await narrow(['events'])).stdout)).to.have.length.at.most(80);
      expect(submitted((await narrow(['events', '-w'])).stdout)).to.equal(submitted(events.stdout));
    }

    it('ends quietly when the reader of its output stops reading (logs RUN | head -1)', async () => {
      const applied = await cli(['apply', '-f', task('many-lines', 'commands: ["seq 1 50000"]\n'), '-y']);
      expect(applied.code, show(applied)).to.equal(0);
      const { stdout, stderr } = await run('sh', ['-c', `"${process.execPath}" "${CLI_MAIN}" logs many-lines | head -1`], { env: { PATH: process.env.PATH ?? '', HOME: home.home } });
      expect(stdout).to.equal('1\n');
      expect(stderr).to.equal('');
    });

    it('shows the plan\'s problem and exits 1 with the reason when nothing can host the run, submitting it only with --queue', async () => {
      const result = await cli(['apply', '-f', task('needs-gpu', 'resources: {gpu: H100}\ncommands: [nvidia-smi]\n'), '-y']);
      expect(result.code, show(result)).to.equal(1);
      expect(result.stderr).to.match(/problem\s+no offers: no local offer matches H100:1/);
      expect(result.stderr).to.match(/^error: task needs-gpu not submitted, as it would fail at once: no offers: no local offer matches H100:1 .*; nothing was applied \(--queue submits it anyway\)$/m);
      expect((await runs()).map((r) => r.name)).not.to.include('needs-gpu');
      const queued = await cli(['apply', '-f', task('needs-gpu', 'resources: {gpu: H100}\ncommands: [nvidia-smi]\n'), '-y', '--queue']);
      expect(queued.code, show(queued)).to.equal(1);
      expect(queued.stderr).to.match(/^error: needs-gpu failed: no offers: no local offer matches H100:1/m);
    });

    it('says so when the token is wrong or the run does not exist', async () => {
      const other = makeHome();
      try {
        const wrongToken = await runCli(['project', 'add', '--name', 'main', '--url', server.url, '--token', 'not-the-token'], { home: other.home });
        expect(wrongToken.code).to.equal(1);
        expect(wrongToken.stderr).to.equal(`error: the server at ${server.url} refused the token of project main (invalid token); set a new one with: orchestrator project add --name main --url ${server.url} --token TOKEN\n`);
        expect(existsSync(join(other.home, '.orchestrator', 'config.yml'))).to.equal(false);
      } finally {
        other.remove();
      }
      const unknown = await cli(['logs', 'no-such-run']);
      expect(unknown.code).to.equal(1);
      expect(unknown.stderr).to.equal('error: run no-such-run not found in project main\n');
    });
  });
}

describe('the terminal of orchestrator server', function () {
  this.timeout(180_000);

  it('logs one line per event at the default level, and says on Ctrl-C what keeps running and that a restart picks it up', async () => {
    const home = makeHome();
    const dir = mkdtempSync(join(tmpdir(), 'orch-server-terminal-'));
    const port = await freePort();
    try {
      const server = startCli(['server', '--port', String(port)], { home: home.home, cwd: REPO, env: { ORCHESTRATOR_SERVER_DIR: dir }, timeoutMs: 170_000 });
      await server.waitFor(/--token (\S+)/, 60_000);
      const token = /--token (\S+)/.exec(server.stdout())![1]!;
      const cli = (args: string[]) => runCli(args, { home: home.home, cwd: REPO, timeoutMs: 90_000 });
      expect((await cli(['project', 'add', '--name', 'main', '--url', `http://127.0.0.1:${port}`, '--token', token])).code).to.equal(0);
      expect((await cli(['apply', '-f', 'examples/fleets/local.yml', '-y'])).code).to.equal(0);
      expect((await cli(['apply', '-f', 'examples/tasks/hello.yml', '-y'])).code).to.equal(0);
      const long = join(dir, 'long.yml');
      writeFileSync(long, 'type: task\nname: long\ncommands: ["sleep 600"]\n');
      expect((await cli(['apply', '-f', long, '-y', '-d'])).code).to.equal(0);
      await server.waitFor(/run long \(main\): Running: /, 30_000);
      const logged = server.stderr();
      for (const line of [
        /^\S+ info fleet local \(main\): Created: /m,
        /^\S+ info run hello \(main\): Submitted: task submitted/m,
        /^\S+ info instance local-0 \(main\): Created: created for run hello/m,
        /^\S+ info run hello \(main\): Running: running on local-0$/m,
        /^\S+ info run hello \(main\): Done: /m,
      ]) expect(logged).to.match(line);

      const stopped = await server.interrupt();
      expect(stopped.stderr).to.contain('stopping: still running without the server: 1 run, 1 instance on local (agents on this machine). Starting orchestrator server again picks them up.\n');
    } finally {
      // The local agents end once their server's folder is gone.
      rmSync(dir, { recursive: true, force: true });
      home.remove();
    }
  });
});
