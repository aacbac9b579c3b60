import { expect } from 'chai';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeHome, runCli, show } from './helpers/cli.js';

/** A loopback port that nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('orchestrator CLI without a server', function () {
  this.timeout(30_000);
  let home: ReturnType<typeof makeHome>;
  let work: string;
  let url: string;
  const cli = (args: string[], input?: string) => runCli(args, { home: home.home, cwd: work, input });

  before(async () => {
    home = makeHome();
    work = mkdtempSync(join(tmpdir(), 'orch-cli-work-'));
    url = `http://127.0.0.1:${await closedPort()}`;
    mkdirSync(join(home.home, '.orchestrator'));
    writeFileSync(join(home.home, '.orchestrator', 'config.yml'), `projects:\n- name: main\n  url: ${url}\n  token: some-token\n  default: true\n`);
  });

  after(() => {
    home.remove();
    rmSync(work, { recursive: true, force: true });
  });

  it('reports every error of a broken configuration with its place, before contacting the server', async () => {
    writeFileSync(join(work, 'broken.yml'), 'type: task\nname: Broken_Name\ncommands:\n  - echo hi\nresources:\n  gpu: H10\nmax_duration: 5 mins\n');
    const result = await cli(['apply', '-f', 'broken.yml', '-y']);
    expect(result.code, show(result)).to.equal(1);
    const lines = result.stderr.trimEnd().split('\n');
    expect(lines).to.have.length(4);
    expect(lines[0]).to.match(/^broken\.yml:2:7: name: "Broken_Name" is not a valid name/);
    expect(lines[1]).to.equal('broken.yml:6:8: resources.gpu: unknown GPU model "H10"; did you mean "H100"?');
    expect(lines[2]).to.match(/^broken\.yml:7:15: max_duration: invalid duration "5 mins"/);
    expect(lines[3]).to.equal('error: the configuration has 3 errors; nothing was applied');
  });

  it('reads every YAML file of a folder and reports a name used twice', async () => {
    const folder = join(work, 'twice');
    mkdirSync(folder);
    writeFileSync(join(folder, 'a.yml'), 'type: task\nname: same\ncommands: [echo a]\n');
    writeFileSync(join(folder, 'b.yaml'), 'type: task\nname: same\ncommands: [echo b]\n');
    writeFileSync(join(folder, 'notes.txt'), 'not a configuration');
    const result = await cli(['apply', '-f', 'twice', '-y']);
    expect(result.code, show(result)).to.equal(1);
    expect(result.stderr).to.contain('twice/b.yaml: name: the run name "same" is also used in twice/a.yml');
  });

  it('refuses to ask for confirmation when stdin is not a terminal', async () => {
    writeFileSync(join(work, 'ok.yml'), 'type: task\nname: ok\ncommands: [echo hi]\n');
    const result = await cli(['apply', '-f', 'ok.yml'], 'y\n');
    expect(result.code, show(result)).to.equal(1);
    expect(result.stderr).to.equal('error: cannot ask for confirmation to apply: stdin is not a terminal; pass -y to go ahead without asking\n');
  });

  it('names the server it cannot reach', async () => {
    const result = await cli(['ps']);
    expect(result.code, show(result)).to.equal(1);
    expect(result.stderr).to.equal(`error: the server at ${url} is not reachable (ECONNREFUSED); runs already submitted keep running there\n`);
  });

  it('explains how to add a project when none is configured, and how to pick one that is not', async () => {
    const empty = makeHome();
    try {
      const none = await runCli(['ps'], { home: empty.home });
      expect(none.code).to.equal(1);
      expect(none.stderr).to.match(/^error: no project configured; run orchestrator project add --name NAME --url URL --token TOKEN/);
    } finally {
      empty.remove();
    }
    const other = await cli(['ps', '--project', 'other']);
    expect(other.code).to.equal(1);
    expect(other.stderr).to.match(/^error: project other is not configured \(configured: main\)/);
  });

  it('keeps tokens out of project list and switches the default', async () => {
    const config = join(home.home, '.orchestrator', 'config.yml');
    const before = readFileSync(config, 'utf8');
    writeFileSync(config, `${before}- name: second\n  url: ${url}\n  token: second-token\n`);
    const switched = await cli(['project', 'set-default', 'second']);
    expect(switched.code, show(switched)).to.equal(0);
    const listed = await cli(['project', 'list']);
    expect(listed.stdout).to.match(/^main\s+http:\S+$/m);
    expect(listed.stdout).to.match(/^second\s+http:\S+\s+yes$/m);
    expect(listed.stdout).not.to.contain('token');
    const back = await cli(['project', 'set-default', 'main']);
    expect(back.code, show(back)).to.equal(0);
  });

  it('turns a mistake on the command line into one error line', async () => {
    const typo = await cli(['ps', '--allz']);
    expect(typo.code).to.equal(1);
    expect(typo.stderr).to.equal('error: Unknown option `--allz`; see orchestrator ps --help\n');
    const missing = await cli(['logs']);
    expect(missing.code).to.equal(1);
    expect(missing.stderr).to.match(/^error: missing required args for command `logs <run>`/);
    const unknown = await cli(['psx']);
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.equal('error: unknown command "psx"; see orchestrator --help\n');
  });
});
