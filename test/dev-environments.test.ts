import { expect } from 'chai';
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import type { Run } from '../api/objects.js';
import { FOLLOWED_POLL_MS } from '../controllers/run-controller.js';
import { endCliSuite, makeHome, runCli, show, startCli, startLocalCliSuite } from './helpers/cli.js';
import { freePort } from './helpers/ports.js';
import { processesWith } from './helpers/processes.js';
import { eventually, type TestServer } from './helpers/server.js';

describe('dev environments through the CLI (pglite)', function () {
  this.timeout(120_000);
  let server: TestServer;
  let home: ReturnType<typeof makeHome>;
  let work: string;
  const cli = (args: string[]) => runCli(args, { home: home.home, cwd: work });
  const devEnvironment = (name: string, body: string) => {
    const file = join(work, `${name}.yml`);
    writeFileSync(file, `type: dev-environment\nname: ${name}\n${body}`);
    return file;
  };
  const view = async (name: string) => (await server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
  const untilRunning = (name: string) => eventually(async () => (await view(name)).status === 'running', 30_000, `${name} to run`);

  before(async function () {
    this.timeout(120_000);
    ({ server, home, work } = await startLocalCliSuite('pglite'));
  });

  after(async function () {
    this.timeout(60_000);
    await endCliSuite(server, home, work);
  });

  it('apply -d starts it: init runs once, ssh enters it with the run\'s env in its work dir, attach forwards a port and gives the IDE link, and it stays up until stopped', async () => {
    const remotePort = await freePort();
    const localPort = await freePort();
    const applied = await cli(['apply', '-d', '-y', '-f', devEnvironment('box', [
      'ide: vscode',
      'init:',
      '  - echo once >> init.txt',
      '  - echo served > index.html',
      `  - (python3 -m http.server ${remotePort} --bind 127.0.0.1 > /dev/null 2>&1 &)`,
      '',
    ].join('\n'))]);
    expect(applied.code, show(applied)).to.equal(0);
    expect(applied.stdout).to.equal('box\n');
    await untilRunning('box');

    const entered = await cli(['ssh', 'box', '--', 'echo $ORCHESTRATOR_RUN_NAME; pwd']);
    expect(entered.code, show(entered)).to.equal(0);
    const [runName, workDir] = entered.stdout.trim().split('\n');
    expect(runName).to.equal('box');
    await eventually(async () => { try { return readFileSync(join(workDir!, 'init.txt'), 'utf8') === 'once\n'; } catch { return false; } }, 10_000, 'init to write its file');

    // A machine that never applied: attach adds the Include line itself, so that plain `ssh box` works.
    rmSync(join(home.home, '.ssh', 'config'), { force: true });
    const attach = startCli(['attach', 'box', '--port', `${localPort}:${remotePort}`], { home: home.home, cwd: work });
    await attach.waitFor(new RegExp(`Forwarding localhost:${localPort} -> port ${remotePort}`));
    expect(attach.stderr()).to.contain(`To open in VS Code Desktop: vscode://vscode-remote/ssh-remote+box${workDir}\n`);
    expect(attach.stderr()).to.contain('To connect via SSH:         ssh box\n');
    expect(attach.stderr()).to.match(/^added "Include .+" at the top of .+, so that "ssh <run>" works/m);
    expect(readFileSync(join(home.home, '.ssh', 'config'), 'utf8')).to.contain(`Include ${join(home.home, '.orchestrator', 'ssh', 'config')}`);
    const answer = await eventually(async () => {
      try {
        const response = await fetch(`http://127.0.0.1:${localPort}/index.html`);
        return response.ok ? response.text() : null;
      } catch {
        return null;
      }
    }, 10_000, 'the forwarded port to answer');
    expect(answer).to.equal('served\n');
    const detached = await attach.interrupt();
    expect(detached.code, show(detached)).to.equal(130);
    expect(detached.stderr).to.contain('detached from box; it keeps running');

    expect(readFileSync(join(workDir!, 'init.txt'), 'utf8')).to.equal('once\n');
    expect((await view('box')).status).to.equal('running');
    const stopped = await cli(['stop', 'box']);
    expect(stopped.code, show(stopped)).to.equal(0);
  });

  it('apply stays attached with the forwards: "*:port" takes a free local port, and the forwards come back after the connection drops', async () => {
    const remotePort = await freePort();
    const file = devEnvironment('attached', [
      `ports: ["*:${remotePort}"]`,
      'init:',
      '  - echo attached > index.html',
      `  - (python3 -m http.server ${remotePort} --bind 127.0.0.1 > /dev/null 2>&1 &)`,
      '',
    ].join('\n'));
    const applied = startCli(['apply', '-y', '-f', file], { home: home.home, cwd: work });
    const forwarding = new RegExp(`Forwarding localhost:(\\d+) -> port ${remotePort} of the run`);
    await applied.waitFor(forwarding, 60_000);
    const localPort = Number(forwarding.exec(applied.stderr() + applied.stdout())![1]);
    expect(localPort).to.not.equal(remotePort);
    const answer = async () => {
      try {
        const response = await fetch(`http://127.0.0.1:${localPort}/index.html`);
        return response.ok ? response.text() : null;
      } catch {
        return null;
      }
    };
    expect(await eventually(answer, 15_000, 'the forwarded port to answer')).to.equal('attached\n');

    const killed = spawnSync('pkill', ['-f', `ssh .*-L 127.0.0.1:${localPort}:localhost:${remotePort}`]);
    expect(killed.status, 'the forwarding ssh process to be found').to.equal(0);
    await applied.waitFor(/connection to attached lost \(.*\); reconnecting in 1s/);
    await applied.waitFor(/reconnected to attached/);
    expect(await eventually(answer, 15_000, 'the forwarded port to answer again')).to.equal('attached\n');

    const detached = await applied.interrupt();
    expect(detached.code, show(detached)).to.equal(130);
    expect((await view('attached')).status).to.equal('running');
    expect((await cli(['stop', 'attached'])).code).to.equal(0);
  });

  it('stop ends the processes started over SSH that left the session: nohup, setsid and a double fork', async () => {
    const port = await freePort();
    const applied = await cli(['apply', '-d', '-y', '-f', devEnvironment('leftover', '')]);
    expect(applied.code, show(applied)).to.equal(0);
    await untilRunning('leftover');
    const probe = `LEFTOVER_PROBE=${randomUUID()}`;
    const started = await cli(['ssh', 'leftover', '--', [
      `${probe} nohup python3 -m http.server ${port} > http.log 2>&1 &`,
      `${probe} setsid sleep 600 > /dev/null 2>&1 < /dev/null &`,
      `(${probe} sleep 601 > /dev/null 2>&1 < /dev/null &) &`,
    ].join(' ')]);
    expect(started.code, show(started)).to.equal(0);
    await eventually(async () => {
      try {
        return (await fetch(`http://127.0.0.1:${port}/`)).ok;
      } catch {
        return false;
      }
    }, 10_000, 'the nohup server to answer');
    await new Promise((done) => setTimeout(done, 3000));
    expect(processesWith(probe), 'the processes to outlive their SSH session').to.have.length(3);

    const stopped = await cli(['stop', 'leftover']);
    expect(stopped.code, show(stopped)).to.equal(0);
    await eventually(async () => (await view('leftover')).status === 'terminated', 20_000, 'the run to end');
    expect(processesWith(probe), 'processes left after stop').to.deep.equal([]);
    const answered = await fetch(`http://127.0.0.1:${port}/`).then(() => true, () => false);
    expect(answered, 'something still listens on the port').to.equal(false);
  });

  it('attach refuses a busy explicit local port with a clear error', async () => {
    const applied = await cli(['apply', '-d', '-y', '-f', devEnvironment('busy', '')]);
    expect(applied.code, show(applied)).to.equal(0);
    await untilRunning('busy');
    const holder: Server = createServer();
    await new Promise<void>((done) => holder.listen(0, '127.0.0.1', done));
    const { port } = holder.address() as { port: number };
    try {
      const refused = await cli(['attach', 'busy', '--port', `${port}:8000`]);
      expect(refused.code, show(refused)).to.equal(1);
      expect(refused.stderr).to.equal(`error: local port ${port} is in use, so ${port}:8000 cannot be forwarded; free it or map another local port\n`);
    } finally {
      await new Promise((done) => holder.close(done));
    }
    expect((await cli(['stop', 'busy'])).code).to.equal(0);
  });

  it('stops after inactivity_duration with no SSH connection, and not while one is open; ps shows the time left', async () => {
    const inactivityMs = 15_000;
    const applied = await cli(['apply', '-d', '-y', '-f', devEnvironment('idle', `inactivity_duration: ${inactivityMs / 1000}s\n`)]);
    expect(applied.code, show(applied)).to.equal(0);
    await untilRunning('idle');
    const firstStopAt = Date.parse(await eventually(async () => (await view('idle')).inactivityStopAt, 5000, 'a stop time while nobody is connected'));
    // The connection outlasts the first stop time however long it takes to open (it must open before that time).
    const held = startCli(['ssh', 'idle', '--', `sleep ${inactivityMs / 1000 + 5}`], { home: home.home, cwd: work });
    await eventually(async () => (await view('idle')).inactivityStopAt === null, firstStopAt - Date.now(), 'the open connection to be seen before the first stop time');
    await new Promise((done) => setTimeout(done, firstStopAt + 2000 - Date.now()));
    expect((await view('idle')).status, 'stopped while a connection was open').to.equal('running');
    expect((await held.done).code).to.equal(0);
    // The server sees the connection closed at its next look at the job, FOLLOWED_POLL_MS at the latest.
    const stopAt = await eventually(async () => (await view('idle')).inactivityStopAt, FOLLOWED_POLL_MS + 5000, 'a stop time once the connection closed');
    expect(Date.parse(stopAt) - Date.now()).to.be.within(0, inactivityMs);
    const listed = await cli(['ps']);
    expect(listed.stdout).to.match(/^idle +dev-environment +running \(idle, stops in \d+s\)/m);
    const ended = await eventually(async () => {
      const run = await view('idle');
      return run.status === 'terminated' ? run : null;
    }, inactivityMs + 5000, 'the idle environment to stop');
    expect(ended.terminationReason).to.equal('inactivity_duration_exceeded');
    expect(ended.statusMessage).to.equal('stopped (inactivity duration exceeded)');
  });
});
