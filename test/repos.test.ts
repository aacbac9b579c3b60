import { expect } from 'chai';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Run } from '../api/objects.js';
import { addProject, endCliSuite, makeHome, runCli, show, startLocalCliSuite, type CliResult, type LocalCliSuite } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { ensurePodman, TEST_IMAGE } from './helpers/podman.js';
import { freePort } from './helpers/ports.js';
import { eventually, startTestServer } from './helpers/server.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const GIT_IDENTITY = { GIT_AUTHOR_NAME: 'Test', GIT_AUTHOR_EMAIL: 'test@example.com', GIT_COMMITTER_NAME: 'Test', GIT_COMMITTER_EMAIL: 'test@example.com' };

function git(cwd: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd, env: { ...process.env, ...GIT_IDENTITY }, encoding: 'utf8' }).trim();
}

/** `git daemon` from Debian's git on a loopback port, serving (and taking pushes to) the bare repos under `base`. */
class GitServer {
  private constructor(readonly base: string, readonly port: number, private readonly child: ChildProcess) {}

  static async start(): Promise<GitServer> {
    const base = mkdtempSync(join(tmpdir(), 'orch-git-server-'));
    const port = await freePort();
    const child = spawn('git', ['daemon', '--export-all', '--enable=receive-pack', '--reuseaddr', '--listen=127.0.0.1', `--port=${port}`, `--base-path=${base}`, base], { stdio: 'ignore' });
    const server = new GitServer(base, port, child);
    server.bare('probe');
    await eventually(async () => {
      try {
        execFileSync('git', ['ls-remote', server.url('probe')], { stdio: 'ignore', timeout: 5000 });
        return true;
      } catch {
        return false;
      }
    }, 10_000, 'git daemon to answer');
    return server;
  }

  url(name: string): string {
    return `git://127.0.0.1:${this.port}/${name}.git`;
  }

  bare(name: string): void {
    execFileSync('git', ['init', '--quiet', '--bare', '--initial-branch=main', join(this.base, `${name}.git`)]);
  }

  stop(): void {
    this.child.kill();
    rmSync(this.base, { recursive: true, force: true });
  }
}

/**
 * Git's smart HTTP: `git http-backend` from Debian's git as a CGI program behind Basic authentication, serving
 * the bare repos of a GitServer to the user `git` with `password` only.
 */
async function startAuthenticatedGitHttp(base: string, password: string): Promise<{ url(name: string, credentials: string): string; close(): void }> {
  const expected = `Basic ${Buffer.from(`git:${password}`).toString('base64')}`;
  const server = createServer((request, response) => {
    if (request.headers.authorization !== expected) {
      response.writeHead(401, { 'www-authenticate': 'Basic realm="git"' }).end();
      return;
    }
    const url = new URL(request.url!, 'http://localhost');
    const cgi = spawn('git', ['http-backend'], {
      env: {
        ...process.env, GIT_PROJECT_ROOT: base, GIT_HTTP_EXPORT_ALL: '1', REMOTE_USER: 'git',
        REQUEST_METHOD: request.method, PATH_INFO: decodeURIComponent(url.pathname), QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: request.headers['content-type'] ?? '', GIT_HTTP_MAX_REQUEST_BUFFER: '100M',
      },
    });
    request.pipe(cgi.stdin);
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      cgi.stdout.off('data', onData);
      const headers = Object.fromEntries(head.subarray(0, end).toString().split('\r\n').map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
      const status = Number(/^\d+/.exec(headers.status ?? '200')![0]);
      delete headers.status;
      response.writeHead(status, headers);
      response.write(head.subarray(end + 4));
      cgi.stdout.pipe(response);
    };
    cgi.stdout.on('data', onData);
  });
  await new Promise<void>((resolvePromise) => server.listen(0, '127.0.0.1', resolvePromise));
  const { port } = server.address() as AddressInfo;
  return {
    url: (name, credentials) => `http://${credentials}@127.0.0.1:${port}/${name}.git`,
    close: () => server.close(),
  };
}

/** A checkout with one pushed commit (tracked.txt, .gitignore) whose origin is `url`. */
function pushedCheckout(parent: string, name: string, url: string | null, server?: GitServer): string {
  const dir = join(parent, name);
  mkdirSync(dir, { recursive: true });
  git(dir, 'init', '--quiet', '--initial-branch=main');
  writeFileSync(join(dir, 'tracked.txt'), 'committed\n');
  writeFileSync(join(dir, '.gitignore'), '*.log\n');
  git(dir, 'add', '.');
  git(dir, 'commit', '--quiet', '-m', 'first');
  if (url !== null) {
    git(dir, 'remote', 'add', 'origin', url);
    if (server) {
      server.bare(name);
      git(dir, 'push', '--quiet', 'origin', 'main');
    }
  }
  return dir;
}

async function apply(suite: LocalCliSuite, dir: string, name: string, yaml: string): Promise<CliResult> {
  const file = join(dir, `${name}.yml`);
  writeFileSync(file, `type: task\nname: ${name}\n${yaml}`);
  return runCli(['apply', '-f', file, '-y', '--no-ssh-config'], { home: suite.home.home, cwd: dir, timeoutMs: 90_000 });
}

async function runOf(suite: LocalCliSuite, name: string): Promise<Run> {
  return (await suite.server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
}

const SHOW_CHECKOUT = 'commands:\n  - cat tracked.txt\n  - cat new.txt\n  - test ! -e debug.log && echo no ignored file\n';

for (const kind of DATABASE_KINDS) {
  describe(`repos on the process runtime, cloned from git daemon on loopback (local backend, ${kind})`, function () {
    this.timeout(180_000);
    let suite: LocalCliSuite;
    let server: GitServer;
    let checkouts: string;

    before(async () => {
      server = await GitServer.start();
      suite = await startLocalCliSuite(kind);
      checkouts = mkdtempSync(join(tmpdir(), 'orch-checkouts-'));
    });
    after(async () => {
      await endCliSuite(suite?.server, suite?.home, suite?.work);
      server?.stop();
      if (checkouts) rmSync(checkouts, { recursive: true, force: true });
    });

    it('- . clones the remote at HEAD and applies uncommitted, unpushed and untracked changes, not ignored files', async () => {
      const dir = pushedCheckout(checkouts, 'project', server.url('project'), server);
      writeFileSync(join(dir, 'pushed-later.txt'), 'unpushed commit\n');
      git(dir, 'add', 'pushed-later.txt');
      git(dir, 'commit', '--quiet', '-m', 'not pushed');
      writeFileSync(join(dir, 'tracked.txt'), 'changed, not committed\n');
      writeFileSync(join(dir, 'new.txt'), 'untracked\n');
      writeFileSync(join(dir, 'debug.log'), 'ignored\n');
      const pushed = git(dir, 'rev-parse', 'HEAD~1');
      const result = await apply(suite, dir, 'dot', `repos:\n  - .\n${SHOW_CHECKOUT}  - cat pushed-later.txt\n  - git rev-parse HEAD\n  - git remote get-url origin\n`);
      expect(result.code, show(result)).to.equal(0);
      expect(result.stdout).to.contain('changed, not committed\nuntracked\nno ignored file\nunpushed commit\n');
      expect(result.stdout).to.contain(`${pushed}\n${server.url('project')}\n`);
      expect(result.stderr).to.not.contain('uploading');
      expect(git(dir, 'status', '--porcelain')).to.contain('?? new.txt');
    });

    it('url clones a branch into path; a commit missing from the remote fails the run saying so', async () => {
      const dir = pushedCheckout(checkouts, 'library', server.url('library'), server);
      git(dir, 'checkout', '--quiet', '-b', 'feature');
      writeFileSync(join(dir, 'tracked.txt'), 'on the feature branch\n');
      git(dir, 'commit', '--quiet', '-am', 'feature');
      git(dir, 'push', '--quiet', 'origin', 'feature');
      const cloned = await apply(suite, checkouts, 'by-url', `repos:\n  - {url: "${server.url('library')}", branch: feature, path: lib}\ncommands:\n  - cat lib/tracked.txt\n`);
      expect(cloned.code, show(cloned)).to.equal(0);
      expect(cloned.stdout).to.contain('on the feature branch');

      const missing = await apply(suite, checkouts, 'no-commit', `repos:\n  - {url: "${server.url('library')}", hash: 0123456789abcdef}\ncommands:\n  - "true"\n`);
      expect(missing.code, show(missing)).to.not.equal(0);
      const run = await runOf(suite, 'no-commit');
      expect(run.status).to.equal('failed');
      expect(run.statusMessage).to.contain(`commit 0123456789abcdef is not in ${server.url('library')}; push it`);
    });

    it('follows if_exists for a repo whose place another repo filled: skip keeps what is there, error fails the run saying so', async () => {
      const outer = pushedCheckout(checkouts, 'outer', null);
      mkdirSync(join(outer, 'sub'));
      writeFileSync(join(outer, 'sub', 'keep.txt'), 'from the outer repo\n');
      git(outer, 'add', '.');
      git(outer, 'commit', '--quiet', '-m', 'sub');
      git(outer, 'remote', 'add', 'origin', server.url('outer'));
      server.bare('outer');
      git(outer, 'push', '--quiet', 'origin', 'main');
      pushedCheckout(checkouts, 'inner', server.url('inner'), server);
      const repos = (ifExists: string) => `repos:\n  - {url: "${server.url('outer')}", path: /workflow}\n  - {url: "${server.url('inner')}", path: sub, if_exists: ${ifExists}}\n`;
      const listSub = 'commands:\n  - ls sub\n';
      const skipped = await apply(suite, checkouts, 'inner-skipped', `${repos('skip')}${listSub}`);
      expect(skipped.code, show(skipped)).to.equal(0);
      expect(skipped.stdout).to.contain('keep.txt\n').and.not.contain('tracked.txt');
      const refused = await apply(suite, checkouts, 'inner-refused', `${repos('error')}${listSub}`);
      expect(refused.code).to.not.equal(0);
      expect((await runOf(suite, 'inner-refused')).statusMessage).to.contain('/workflow/sub is not empty, and its repo says if_exists: error');
    });

    it('clones over the smart HTTP protocol of git with a password from a secret, and hides the credentials when the clone is refused', async () => {
      const password = `pw-${randomBytes(8).toString('hex')}`;
      const http = await startAuthenticatedGitHttp(server.base, password);
      try {
        pushedCheckout(checkouts, 'private', server.url('private'), server);
        const stored = await runCli(['secret', 'set', 'GIT_PASSWORD'], { home: suite.home.home, input: password });
        expect(stored.code, show(stored)).to.equal(0);
        const cloned = await apply(suite, checkouts, 'with-secret', `repos:\n  - url: "${http.url('private', 'git:${{ secrets.GIT_PASSWORD }}')}"\ncommands:\n  - cat tracked.txt\n`);
        expect(cloned.code, show(cloned)).to.equal(0);
        expect(cloned.stdout).to.contain('committed');

        const refused = await apply(suite, checkouts, 'wrong-password', `repos:\n  - url: "${http.url('private', 'git:not-the-password')}"\ncommands:\n  - "true"\n`);
        expect(refused.code, show(refused)).to.not.equal(0);
        const run = await runOf(suite, 'wrong-password');
        expect(run.status).to.equal('failed');
        expect(run.statusMessage).to.contain(http.url('private', '***'));
        const events = await runCli(['events', '--object', 'wrong-password'], { home: suite.home.home });
        for (const shown of [run.statusMessage, cloned.stdout, cloned.stderr, refused.stdout, refused.stderr, events.stdout]) {
          expect(shown).not.to.contain('not-the-password');
          expect(shown).not.to.contain(password);
        }
      } finally {
        http.close();
      }
    });

    it('uploads the working tree of a repo whose remote does not answer', async () => {
      const closed = await freePort();
      const dir = pushedCheckout(checkouts, 'offline', `git://127.0.0.1:${closed}/offline.git`);
      writeFileSync(join(dir, 'new.txt'), 'untracked\n');
      writeFileSync(join(dir, 'debug.log'), 'ignored\n');
      const result = await apply(suite, dir, 'offline', `repos:\n  - .\n${SHOW_CHECKOUT}`);
      expect(result.code, show(result)).to.equal(0);
      expect(result.stderr).to.match(/repos: .*offline: its remote origin did not answer .*; uploading its working tree \(\d+ files, /);
      expect(result.stdout).to.contain('committed\nuntracked\nno ignored file\n');
    });

    it('refuses changes over the bound before anything is applied', async () => {
      const dir = pushedCheckout(checkouts, 'large', server.url('large'), server);
      writeFileSync(join(dir, 'data.bin'), randomBytes(6 * 1024 * 1024));
      const result = await apply(suite, dir, 'large', 'repos:\n  - .\ncommands:\n  - "true"\n');
      expect(result.code, show(result)).to.not.equal(0);
      expect(result.stderr).to.match(/repos: the changes in .*large that origin lacks \(uncommitted, and commits since [0-9a-f]{8}\) come to \d+\.\d MiB, over the 5\.0 MiB left of the 5\.0 MiB one apply carries; commit and push them/);
      expect((await suite.server.api('GET', '/api/projects/main/runs/large')).status).to.equal(404);
    });

    it('refuses a local repo sent through the API without its contents', async () => {
      const response = await suite.server.api('POST', '/api/projects/main/apply', { items: [{ spec: { type: 'task', commands: ['true'], repos: ['.'] } }] });
      expect(response.status).to.equal(422);
      expect(response.body.error.message).to.contain('the local repo . is read from the applier\'s machine; apply it with orchestrator apply, or give its url');
    });
  });
}

describe('repos in containers (local backend, runtime docker on Podman)', function () {
  this.timeout(180_000);
  let suite: LocalCliSuite;
  let server: GitServer;
  let checkouts: string;
  const previousDockerHost = process.env.DOCKER_HOST;

  before(async () => {
    process.env.DOCKER_HOST = await ensurePodman();
    server = await GitServer.start();
    const api = await startTestServer('pglite', 'projects:\n- name: main\n  backends:\n  - type: local\n    runtime: docker\n');
    const home = makeHome();
    suite = { server: api, home, work: mkdtempSync(join(tmpdir(), 'orch-repos-work-')) };
    await addProject(home.home, api.url);
    const fleet = await runCli(['apply', '-f', 'examples/fleets/local.yml', '-y'], { home: home.home, cwd: REPO_ROOT });
    expect(fleet.code, show(fleet)).to.equal(0);
    checkouts = mkdtempSync(join(tmpdir(), 'orch-checkouts-'));
  });
  after(async () => {
    await endCliSuite(suite?.server, suite?.home, suite?.work);
    server?.stop();
    if (checkouts) rmSync(checkouts, { recursive: true, force: true });
    if (previousDockerHost === undefined) delete process.env.DOCKER_HOST;
    else process.env.DOCKER_HOST = previousDockerHost;
  });

  it('puts the clone with its changes at /workflow and a second repo at its path, .git included', async () => {
    const dir = pushedCheckout(checkouts, 'app', server.url('app'), server);
    writeFileSync(join(dir, 'new.txt'), 'untracked\n');
    pushedCheckout(checkouts, 'shared', server.url('shared'), server);
    const result = await apply(suite, dir, 'in-container', [
      `image: ${TEST_IMAGE}`,
      'repos:',
      '  - .',
      `  - {url: "${server.url('shared')}", path: /opt/shared}`,
      'commands:',
      '  - pwd',
      '  - cat tracked.txt new.txt /opt/shared/tracked.txt',
      '  - test -d /workflow/.git && test -d /opt/shared/.git && echo both have .git',
    ].join('\n'));
    expect(result.code, show(result)).to.equal(0);
    expect(result.stdout).to.contain('/workflow\ncommitted\nuntracked\ncommitted\nboth have .git\n');
  });

  it('follows dstack\'s if_exists where the image has files at the repo\'s path: skip keeps them, error fails the run saying so', async () => {
    pushedCheckout(checkouts, 'tools', server.url('tools'), server);
    const repoAt = (path: string, ifExists: string) => `repos:\n  - {url: "${server.url('tools')}", path: ${path}, if_exists: ${ifExists}}\n`;
    const skipped = await apply(suite, checkouts, 'skip-over-bin', `image: ${TEST_IMAGE}\n${repoAt('/bin', 'skip')}${repoAt('/opt/tools', 'skip').slice('repos:\n'.length)}commands:\n  - test ! -e /bin/tracked.txt && test -x /bin/sh && echo the image keeps /bin\n  - cat /opt/tools/tracked.txt\n`);
    expect(skipped.code, show(skipped)).to.equal(0);
    expect(skipped.stdout).to.contain('the image keeps /bin\ncommitted\n');
    const refused = await apply(suite, checkouts, 'error-over-bin', `image: ${TEST_IMAGE}\n${repoAt('/bin', 'error')}commands:\n  - "true"\n`);
    expect(refused.code, show(refused)).to.not.equal(0);
    expect((await runOf(suite, 'error-over-bin')).statusMessage).to.contain('/bin is not empty, and its repo says if_exists: error; give the repo another path, or if_exists: skip to keep what is there');
  });
});
