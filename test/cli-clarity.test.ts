import { expect } from 'chai';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Fleet, Run } from '../api/objects.js';
import { startEmulator, type RunningEmulator } from '../backends/gpucloud/emulator.js';
import { renderTable } from '../cli/table.js';
import { addProject, makeHome, releaseInstances, runCli, show, startCli } from './helpers/cli.js';
import { ONE_DATABASE } from './helpers/databases.js';
import { eventually, localAndGpucloudConfig, startTestServer, type TestServer } from './helpers/server.js';
import { Terminal } from './helpers/terminal.js';

const REPO = resolve(import.meta.dirname, '..');

describe('errors of the server and the emulator', function () {
  this.timeout(60_000);

  it('start with error: as every command\'s do, a fault in one line that says what failed and where its trace went', async () => {
    const home = makeHome();
    const dir = mkdtempSync(join(tmpdir(), 'orch-server-errors-'));
    try {
      for (const command of ['server', 'gpucloud-emulator']) {
        const refused = await runCli([command, '--port', 'abc'], { home: home.home });
        expect(refused.code, show(refused)).to.equal(1);
        expect(refused.stderr).to.equal('error: --port must be a port number from 0 to 65535, got abc\n');
      }
      const unreachable = await runCli(['server', '--port', '0'], { home: home.home, env: { ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' } });
      expect(unreachable.code, show(unreachable)).to.equal(1);
      expect(unreachable.stderr).to.match(/^error: the server could not start: \S.*; its full trace is in \S+errors\.log\)\n$/);
      expect(unreachable.stderr, 'a line that starts with an error class').not.to.match(/^\w*Error\b/m);
    } finally {
      home.remove();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('orchestrator --version', () => {
  it('prints the version of the package and exits 0', async () => {
    const home = makeHome();
    try {
      const { version } = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string };
      const result = await runCli(['--version'], { home: home.home });
      expect(result.code, show(result)).to.equal(0);
      expect(result.stdout).to.equal(`orchestrator ${version}\n`);
    } finally {
      home.remove();
    }
  });
});

describe('orchestrator --help', () => {
  let home: ReturnType<typeof makeHome>;
  before(() => { home = makeHome(); });
  after(() => home.remove());
  const help = async (...args: string[]) => {
    const result = await runCli([...args, '--help'], { home: home.home });
    expect(result.code, show(result)).to.equal(0);
    return result.stdout;
  };

  it('starts a command\'s help with what the command does, so that service --help names stats', async () => {
    expect((await help('apply')).split('\n')[0]).to.equal('orchestrator apply: Create or update fleets and submit runs from YAML files, then follow the run');
    expect((await help('service')).split('\n')[0]).to.match(/^orchestrator service: .*\bstats\b/);
    expect((await help('ps')).split('\n')[0]).to.match(/^orchestrator ps: List runs/);
  });

  it('does not say (default: true) of --no-ssh-config, which reads as if leaving ~/.ssh/config alone were the default', async () => {
    for (const command of ['apply', 'attach']) {
      const line = (await help(command)).split('\n').find((l) => l.trimStart().startsWith('--no-ssh-config'));
      expect(line, command).to.match(/by default .* adds one Include line/);
      expect(line, command).not.to.contain('default: true');
    }
  });

  it('lists the commands orchestrator starts itself (agent, gateway-server, ssh-proxy) under their own heading, after the user\'s', async () => {
    const text = await help();
    const [users, internal] = text.split('Started by orchestrator itself, not typed by hand:\n');
    const names = (part: string) => [...part!.matchAll(/^ {2}([a-z-]+)\b/gm)].map((m) => m[1]);
    expect(names(users!.split('Commands:\n')[1]!.split('\n\n')[0]!)).to.include.members(['server', 'apply', 'ps', 'logs']).and.not.to.include.members(['agent']);
    expect(names(users!)).not.to.include.members(['gateway-server', 'ssh-proxy']);
    expect(names(internal!.split('\n\n')[0]!)).to.deep.equal(['agent', 'gateway-server', 'ssh-proxy']);
  });

  it('answers apply file.yml (no -f) with the command it probably meant', async () => {
    const result = await runCli(['apply', 'train.yml', '-y'], { home: home.home });
    expect(result.code, show(result)).to.equal(1);
    expect(result.stderr).to.equal('error: apply reads files given with -f, not as plain words: did you mean orchestrator apply -f train.yml?\n');
  });
});

describe('size columns and long lists in tables', () => {
  it('ends a cut list with how many rows were left out and the command that shows them all', () => {
    const rows = Array.from({ length: 15 }, (_, index) => [`offer-${index}`, '$1']);
    const table = renderTable(['name', '$/h'], rows, 80, { maxRows: 3, seeAll: 'orchestrator offer --json' });
    expect(table.trimEnd().split('\n')).to.deep.equal(['NAME     $/H', 'offer-0  $1', 'offer-1  $1', 'offer-2  $1', '… 12 more; orchestrator offer --json shows all']);
    expect(renderTable(['name'], [['a'], ['b']], 80, { maxRows: 2, total: 7, seeAll: 'orchestrator offer --json' })).to.match(/^… 5 more; orchestrator offer --json shows all$/m);
    expect(renderTable(['name'], [['a'], ['b']], 80, { maxRows: 2, seeAll: 'orchestrator offer --json' })).not.to.contain('more');
  });
});

for (const kind of ONE_DATABASE) {
  describe(`orchestrator CLI says what is going on (${kind})`, function () {
    this.timeout(120_000);
    let emulator: RunningEmulator;
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    let work: string;
    const cli = (args: string[]) => runCli(args, { home: home.home, cwd: work });

    before(async function () {
      emulator = await startEmulator({ port: 0, bootDelayMs: 200 });
      server = await startTestServer(kind, localAndGpucloudConfig(emulator.url, emulator.apiKey));
      home = makeHome();
      work = mkdtempSync(join(tmpdir(), 'orch-clarity-'));
      await addProject(home.home, server.url);
      writeFileSync(join(work, 'fleet.yml'), 'type: fleet\nname: pool\nbackends: [local]\nnodes: 0..1\n');
    });

    after(async function () {
      if (server) {
        await releaseInstances(server).catch(() => undefined);
        await server.stop();
      }
      await emulator?.close();
      home?.remove();
      if (work) rmSync(work, { recursive: true, force: true });
    });

    it('writes a column of sizes in one unit: 1024GB next to 1800GB, not 1TB', async () => {
      const result = await cli(['offer', '-b', 'gpucloud']);
      expect(result.code, show(result)).to.equal(0);
      expect(result.stdout).to.match(/^RTXPRO6000\s+96GB\s+8\s+128\s+1024GB\s+4000GB\s/m);
      expect(result.stdout).to.match(/^H100\s+80GB\s+8\s+208\s+1800GB\s+8000GB\s/m);
      expect(result.stdout).to.match(/^L4\s+24GB\s+1\s+8\s+32GB\s+200GB\s/m);
      expect(result.stdout).not.to.match(/\dTB\b/);
    });

    it('shows a deleted fleet as terminating while it waits for its busy instance, then two fleets of one name apart with -a', async () => {
      expect((await cli(['apply', '-f', 'fleet.yml', '-y'])).code).to.equal(0);
      const release = join(work, 'release');
      writeFileSync(join(work, 'busy.yml'), `type: task\nname: busy\ncommands: ["echo started", "until [ -f ${release} ]; do sleep 0.1; done"]\n`);
      const task = startCli(['apply', '-f', 'busy.yml', '-y'], { home: home.home, cwd: work });
      await task.waitFor(/started/);
      const deleted = await cli(['fleet', 'delete', 'pool', '-y']);
      expect(deleted.code, show(deleted)).to.equal(0);

      const table = await eventually(async () => {
        const listed = await cli(['fleet']);
        return /terminating: waiting for 1 busy instance to finish/.test(listed.stdout) ? listed.stdout : null;
      }, 20_000, 'the fleet to say it waits for its busy instance');
      const lines = table.trimEnd().split('\n');
      expect(lines[1], table).to.match(/^pool\s+-\s+local\s+-\s+terminating: waiting for 1 busy instance to finish\s+-\s+-\s+-$/);
      expect(lines[2], table).to.match(/^\s+pool-\S+\s+local\s+\S+\s+busy\s+\S+\s+\S+\s+busy$/);

      writeFileSync(release, '');
      expect((await task.done).code).to.equal(0);
      await eventually(async () => (await server.api('GET', '/api/projects/main/fleets')).body.length === 0, 30_000, 'the fleet to end');
      expect((await cli(['apply', '-f', 'fleet.yml', '-y'])).code).to.equal(0);

      const fleets = JSON.parse((await cli(['fleet', '-a', '--json'])).stdout) as Fleet[];
      expect(fleets.map((f) => [f.name, f.status])).to.deep.equal([['pool', 'terminated'], ['pool', 'active']]);
      const history = await cli(['fleet', '-a']);
      expect(history.code, show(history)).to.equal(0);
      expect(history.stdout.split('\n')[0]).to.match(/^FLEET\s+ID\s+CREATED\s+INSTANCE/);
      for (const fleet of fleets) {
        expect(history.stdout).to.match(new RegExp(`^pool\\s+${fleet.id.slice(0, 8)}\\s+\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\s+-\\s+local\\s+-\\s+${fleet.status}`, 'm'));
      }
    });

    it('ends with 130 and no stack trace on Ctrl-C at a [y/N] question (fleet delete, apply), doing nothing', async () => {
      expect((await cli(['apply', '-f', 'fleet.yml', '-y'])).code).to.equal(0);
      writeFileSync(join(work, 'other-fleet.yml'), 'type: fleet\nname: other\nbackends: [local]\nnodes: 0..1\n');
      for (const [args, question] of [[['fleet', 'delete', 'pool'], /Delete fleet pool\b.*\[y\/N\]\s*$/m], [['apply', '-f', 'other-fleet.yml'], /Create fleet other\? \[y\/N\]\s*$/m]] as const) {
        const terminal = new Terminal();
        try {
          await terminal.start(args, home.home, work);
          await terminal.waitFor(question);
          await terminal.press('C-c');
          const screen = await terminal.waitFor(/^exited \d+$/m);
          expect(screen, screen).to.match(/^exited 130$/m);
          expect(screen, screen).not.to.match(/error|AbortError|    at /);
        } finally {
          await terminal.close();
        }
      }
      const fleets = (await server.api('GET', '/api/projects/main/fleets')).body as Fleet[];
      expect(fleets.map((f) => f.name)).to.include('pool').and.not.to.include('other');
    });

    it('submits no task that no fleet is there for, keeping the finished run of its name and its logs; with --queue it waits for a fleet', async () => {
      expect((await cli(['apply', '-f', 'fleet.yml', '-y'])).code).to.equal(0);
      writeFileSync(join(work, 'lonely.yml'), 'type: task\nname: lonely\ncommands: ["echo from a run"]\n');
      const first = await cli(['apply', '-f', 'lonely.yml', '-y']);
      expect(first.code, show(first)).to.equal(0);
      expect((await cli(['fleet', 'delete', 'pool', '-y'])).code).to.equal(0);
      await eventually(async () => (await server.api('GET', '/api/projects/main/fleets')).body.length === 0, 30_000, 'the fleet to end');

      const refused = await cli(['apply', '-f', 'lonely.yml', '-y']);
      expect(refused.code, show(refused)).to.equal(1);
      expect(refused.stderr).to.contain('task lonely: replace (the finished run lonely is replaced, and its logs with it)\n');
      const problem = 'no fleet: this project has no active fleet; the run waits until one is applied (e.g. examples/fleets/local.yml)';
      expect(refused.stderr).to.contain(`  problem      waiting: ${problem}\n`);
      expect(refused.stderr).to.match(new RegExp(`\\nerror: task lonely not submitted, as no fleet is there for it: ${problem.replace(/[().]/g, '\\$&')}; nothing was applied \\(--queue submits it to wait in the queue\\)\\n$`));
      const kept = await cli(['logs', 'lonely']);
      expect(kept.stdout, show(kept)).to.equal('from a run\n');

      const terminal = new Terminal();
      try {
        await terminal.start(['apply', '-f', 'lonely.yml'], home.home, work);
        const screen = await terminal.waitFor(/^exited \d+$/m);
        expect(screen, screen).to.match(/^exited 1$/m);
        expect(screen, 'no question asked').not.to.contain('[y/N]');
      } finally {
        await terminal.close();
      }

      const queued = await cli(['apply', '-f', 'lonely.yml', '-y', '-d', '--queue']);
      expect(queued.code, show(queued)).to.equal(0);
      const waiting = await eventually(async () => {
        const run = (await server.api('GET', '/api/projects/main/runs/lonely')).body as Run;
        return run.statusMessage === `waiting: ${problem}` && run;
      }, 10_000, 'the run to wait for a fleet');
      expect(waiting.status).to.equal('submitted');
      expect((await cli(['apply', '-f', 'fleet.yml', '-y'])).code).to.equal(0);
      const followed = await cli(['logs', '-f', 'lonely']);
      expect(followed.code, show(followed)).to.equal(0);
      expect(followed.stdout).to.equal('from a run\n');
    });

    it('names the project and the command to set a new token when the server refuses the token', async () => {
      const config = join(home.home, '.orchestrator', 'config.yml');
      const saved = readFileSync(config, 'utf8');
      writeFileSync(config, saved.replace('test-admin-token', 'a-revoked-token'));
      try {
        const result = await cli(['ps']);
        expect(result.code, show(result)).to.equal(1);
        expect(result.stderr).to.equal([
          `error: the server at ${server.url} refused the token of project main (invalid token);`,
          `set a new one with: orchestrator project add --name main --url ${server.url} --token TOKEN\n`,
        ].join(' '));
      } finally {
        writeFileSync(config, saved);
      }
    });

    it('says the server is not reachable, that runs keep running, and how to follow again', async () => {
      const own = await startTestServer(kind, localAndGpucloudConfig(emulator.url, emulator.apiKey));
      const ownHome = makeHome();
      let running = true;
      try {
        await addProject(ownHome.home, own.url);
        writeFileSync(join(work, 'long.yml'), 'type: fleet\nname: long\nbackends: [local]\nnodes: 0..1\n---\ntype: task\nname: long\ncommands: ["echo started", "sleep 60"]\n');
        const followed = startCli(['apply', '-f', 'long.yml', '-y'], { home: ownHome.home, cwd: work });
        await followed.waitFor(/started/);
        await own.stop();
        running = false;
        const ended = await followed.done;
        expect(ended.code, show(ended)).to.equal(1);
        expect(ended.stderr).to.contain([
          `error: the server at ${own.url} is not reachable (ECONNREFUSED); runs already submitted keep running there;`,
          'follow again with: orchestrator logs -f long\n',
        ].join(' '));
        const listed = await runCli(['ps'], { home: ownHome.home });
        expect(listed.code, show(listed)).to.equal(1);
        expect(listed.stderr).to.equal(`error: the server at ${own.url} is not reachable (ECONNREFUSED); runs already submitted keep running there\n`);
      } finally {
        if (running) await own.stop();
        ownHome.remove();
      }
    });
  });
}
