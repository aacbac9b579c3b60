import { expect } from 'chai';
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { AgentClient } from '../agent/client.js';
import { startAgent } from '../agent/server.js';
import { collectLogs, randomToken, submission } from './helpers/agent-jobs.js';
import { addProject, CLI_MAIN, makeHome, releaseInstances, runCli, show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const run = promisify(execFile);

/** The order in which `patterns` first match `text`; fails naming the first one missing. */
function positions(text: string, patterns: readonly RegExp[]): number[] {
  return patterns.map((pattern) => {
    const index = text.search(pattern);
    expect(index, `${pattern} in:\n${text}`).to.be.at.least(0);
    return index;
  });
}

// The run's first status line is `submitted: …` only when the scheduler had not yet placed it as apply answered.
const STATUS_THEN_LOGS = [/^task \S+ submitted$/m, /^provisioning: /m, /^running\b/m, /^first line$/m, /^second line$/m, /^done\b/m];

for (const kind of DATABASE_KINDS) {
  describe(`orchestrator apply: statuses and logs in the order they happened (${kind})`, function () {
    this.timeout(120_000);
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    let work: string;
    const tmux = (...args: string[]) => run('tmux', ['-L', `orch-order-${process.pid}`, ...args]);

    before(async function () {
      server = await startTestServer(kind, LOCAL_CONFIG);
      home = makeHome();
      work = mkdtempSync(join(tmpdir(), 'orch-order-'));
      await addProject(home.home, server.url);
      writeFileSync(join(work, 'fleet.yml'), 'type: fleet\nname: order\nbackends: [local]\nnodes: 0..1\n');
    });

    after(async function () {
      await tmux('kill-server').catch(() => undefined);
      if (server) {
        await releaseInstances(server).catch(() => undefined);
        await server.stop();
      }
      home?.remove();
      if (work) rmSync(work, { recursive: true, force: true });
    });

    /** The CLI's stdout and stderr together, through one pipe, as `2>&1` gives them, then through `reader` when given. */
    const merged = (args: string, reader = '') => new Promise<string>((resolve, reject) => {
      const child = spawn('sh', ['-c', `"${process.execPath}" "${CLI_MAIN}" ${args} 2>&1${reader}`], {
        env: { PATH: process.env.PATH ?? '', HOME: home.home, LANG: 'C.UTF-8' }, cwd: work,
      });
      let text = '';
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => { text += chunk; });
      child.on('error', reject);
      child.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`exit ${code}:\n${text}`))));
    });

    /** A task on a new instance of a fresh fleet, so that it is provisioned while followed. */
    const freshTask = async (name: string, commands: string[]): Promise<string> => {
      await releaseInstances(server);
      await eventually(async () => (await server.api('GET', '/api/projects/main/fleets')).body.length === 0, 20_000, 'the deleted fleet to end');
      const fleet = await runCli(['apply', '-f', 'fleet.yml', '-y'], { home: home.home, cwd: work });
      expect(fleet.code, show(fleet)).to.equal(0);
      const file = join(work, `${name}.yml`);
      writeFileSync(file, `type: task\nname: ${name}\ncommands: ${JSON.stringify(commands)}\n`);
      return file;
    };

    it('writes submitted, provisioning, running, the logs, then done, in that order, to one pipe', async () => {
      const file = await freshTask('piped', ['echo first line', 'echo second line']);
      const output = await merged(`apply -f "${file}" -y`);
      const found = positions(output, STATUS_THEN_LOGS);
      expect(found, output).to.deep.equal([...found].sort((a, b) => a - b));
    });

    it('leaves the same order on the final screen of a terminal, each status once, no spinner left', async () => {
      const file = await freshTask('on-terminal', ['echo first line', 'echo second line']);
      const command = `env -i PATH="${process.env.PATH}" HOME="${home.home}" LANG=C.UTF-8 "${process.execPath}" "${CLI_MAIN}" apply -f "${file}" -y; echo "exited $?"; sleep 600`;
      await tmux('new-session', '-d', '-x', '160', '-y', '80', '-c', work, '-s', 'apply', command);
      const screen = await eventually(async () => {
        const { stdout } = await tmux('capture-pane', '-p', '-t', 'apply', '-S', '-');
        return /^exited \d+$/m.test(stdout) ? stdout : null;
      }, 60_000, 'apply to end on the terminal');
      expect(screen, screen).to.match(/^exited 0$/m);
      const found = positions(screen, STATUS_THEN_LOGS);
      expect(found, screen).to.deep.equal([...found].sort((a, b) => a - b));
      for (const status of ['provisioning', 'running', 'done']) {
        expect(screen.match(new RegExp(`^${status}\\b`, 'gm')), screen).to.have.length(1);
      }
      expect(screen.match(/^submitted\b/gm) ?? [], screen).to.have.length.at.most(1);
      expect(screen).not.to.match(/[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏]/);
    });

    it('keeps the order of stdout and stderr: an error comes before the fallback that answered it', async () => {
      const file = await freshTask('fallback', ['for i in $(seq 1 200); do ls /nonexistent || echo fallback; sleep 0.01; done']);
      const applied = await runCli(['apply', '-f', file, '-y', '-d'], { home: home.home, cwd: work });
      expect(applied.code, show(applied)).to.equal(0);
      await eventually(async () => (await server.api('GET', '/api/projects/main/runs/fallback')).body.status === 'done', 60_000, 'the task to end');
      const logs = await merged('logs fallback');
      const lines = logs.trimEnd().split('\n');
      expect(lines.filter((line) => line === 'fallback'), logs).to.have.length(200);
      expect(lines.filter((line) => line.includes('/nonexistent')), logs).to.have.length(200);
      // Output read in one go may hold several rounds (errors, then fallbacks), but never a fallback before its error.
      let unanswered = 0;
      for (const [index, line] of lines.entries()) {
        unanswered += line === 'fallback' ? -1 : 1;
        expect(unanswered, `line ${index + 1} of:\n${logs}`).to.be.at.least(0);
      }
    });

    it('keeps that order into a pipe that fills up because its reader is slower than the output', async () => {
      // 200 errors of about 450 bytes each: more than a pipe holds (64 KiB) while its reader sleeps.
      const file = await freshTask('slow-reader', ['for i in $(seq 1 200); do cat /nonexistent/$(printf %0400d $i) || echo fallback; sleep 0.01; done']);
      const applied = await runCli(['apply', '-f', file, '-y', '-d'], { home: home.home, cwd: work });
      expect(applied.code, show(applied)).to.equal(0);
      await eventually(async () => (await server.api('GET', '/api/projects/main/runs/slow-reader')).body.status === 'done', 60_000, 'the task to end');
      const logs = await merged('logs slow-reader', ' | { sleep 1; cat; }');
      const lines = logs.trimEnd().split('\n');
      expect(lines.filter((line) => line === 'fallback')).to.have.length(200);
      let unanswered = 0;
      for (const [index, line] of lines.entries()) {
        unanswered += line === 'fallback' ? -1 : 1;
        expect(unanswered, `line ${index + 1} of ${lines.length}`).to.be.at.least(0);
      }
    });
  });
}

describe('agent (process runtime): the order of stdout and stderr', function () {
  this.timeout(120_000);

  it('puts the error of `ls /nonexistent || echo fallback` before the fallback, in each of 200 jobs', async () => {
    const scratch = mkdtempSync(join(tmpdir(), 'orch-order-agent-'));
    const token = randomToken();
    const agent = await startAgent({ token, runtime: 'process', instanceId: 'order-test', workDir: join(scratch, 'agent') });
    try {
      const client = new AgentClient(agent.url, token);
      const firstStreams: string[] = [];
      for (let round = 0; round < 200; round++) {
        const job = submission({ commands: ['ls /nonexistent || echo fallback'] });
        await client.submit(job);
        const entries = await collectLogs(client, job.jobId);
        firstStreams.push(entries.map((entry) => entry.stream).join(','));
      }
      expect(firstStreams.filter((streams) => streams !== 'stderr,stdout')).to.deep.equal([]);
    } finally {
      await agent.close();
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
