import { expect } from 'chai';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadServerConfig, StartupError } from '../server/config.js';
import { startServer } from '../server/server.js';
import { freePort } from './helpers/ports.js';

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'orch-config-'));
}

function configError(text: string): string {
  const dir = tempDir();
  const path = join(dir, 'config.yml');
  writeFileSync(path, text);
  try {
    loadServerConfig(path);
  } catch (error) {
    expect(error).to.be.instanceOf(ConfigError);
    return (error as Error).message.replaceAll(path, 'config.yml');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  throw new Error('the config was accepted');
}

const started: ChildProcess[] = [];

/** The pids of the processes whose command line names `text`. */
function processesNaming(text: string): number[] {
  return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry)).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(text);
    } catch {
      return false;
    }
  }).map(Number);
}

interface ServerProcess {
  stdout: string;
  stderr: string;
  code: number | null;
  pid: number;
  stop(): Promise<void>;
}

/** Starts `orchestrator server` (with `args` added, `env` over this process's) and resolves with its output once it prints its URL, or once it exits. */
function serverProcess(dir: string, port: number, args: string[] = [], env: Record<string, string> = {}): Promise<ServerProcess> {
  const child = spawn(process.execPath, ['dist/cli/main.js', 'server', '--port', String(port), ...args], {
    env: { ...process.env, ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_SERVER_ADMIN_TOKEN: '', ORCHESTRATOR_DATABASE_URL: '', ORCHESTRATOR_LOG_LEVEL: 'error', ...env },
  });
  started.push(child);
  let stdout = '';
  let stderr = '';
  child.stderr.on('data', (d) => { stderr += d; });
  const stop = () => new Promise<void>((resolve) => { child.once('exit', () => resolve()); child.kill('SIGTERM'); });
  return new Promise((resolve) => {
    child.stdout.on('data', (d) => {
      stdout += d;
      if (stdout.includes('Server URL')) resolve({ stdout, stderr, code: null, pid: child.pid!, stop });
    });
    child.once('exit', (code) => resolve({ stdout, stderr, code, pid: child.pid!, stop: async () => {} }));
  });
}

describe('server configuration', function () {
  this.timeout(60_000);
  afterEach(() => {
    for (const child of started.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  });

  it('writes a default config.yml with project main on the local backend and a commented gpucloud example', () => {
    const dir = tempDir();
    const config = loadServerConfig(join(dir, 'config.yml'));
    expect(config).to.deep.equal({ projects: [{ name: 'main', backends: [{ type: 'local' }] }] });
    expect(readFileSync(join(dir, 'config.yml'), 'utf8')).to.match(/^ {2}# - type: gpucloud$/m);
    rmSync(dir, { recursive: true, force: true });
  });

  it('names the file, line, column and field of every mistake', () => {
    expect(configError('projects:\n- name: main\n  backends:\n  - type: gcp\n')).to.equal(
      'invalid server config:\nconfig.yml:4:11: projects[0].backends[0].type: unknown backend type "gcp"; expected one of: gpucloud, local, kubernetes');
    expect(configError('projects:\n- name: main\n  backends:\n  - type: gpucloud\n    api_url: http://x\n')).to.match(
      /^config\.yml:4:5: projects\[0\]\.backends\[0\]\.creds: missing; this field is required$/m);
    expect(configError('projects:\n- name: Main Project\n  backends: []\n')).to.match(/^config\.yml:2:9: projects\[0\]\.name: /m);
    expect(configError('projects:\n  - name: main\n   backends: [\n')).to.match(/^config\.yml:\d+:\d+: /);
    expect(configError('projects:\n- name: main\n  backends: *missing\n')).to.equal(
      'config.yml: Unresolved alias (the anchor must be set before the alias): missing');
  });

  it('names the mistakes of the kubernetes section, and stops the start on a kubeconfig it cannot read', async () => {
    const local = 'projects:\n- name: main\n  backends:\n  - type: local\n';
    expect(configError(`${local}kubernetes:\n  watch:\n    project: research\n`)).to.equal(
      'invalid server config:\nconfig.yml:7:14: kubernetes.watch.project: no project "research" in this file; expected one of: main');
    expect(configError(`${local}kubernetes:\n  watch:\n    namespaces: [ML_Team]\n`)).to.match(/^config\.yml:7:18: kubernetes\.watch\.namespaces\[0\]: /m);
    const misplaced = configError(`${local}kubernetes:\n  namespaces: [ml]\n`);
    expect(misplaced).to.match(/^config\.yml:6:3: kubernetes\.watch: missing; this field is required$/m);
    expect(misplaced).to.match(/^config\.yml:6:\d+: kubernetes\.namespaces: unknown field$/m);
    const dir = tempDir();
    writeFileSync(join(dir, 'config.yml'), `${local}kubernetes:\n  kubeconfig: ${join(dir, 'no-such-kubeconfig')}\n  watch: {}\n`);
    const failed = await startServer({ dir, port: 0 }).then(() => null, (error: Error) => error);
    expect(failed).to.be.instanceOf(StartupError);
    expect(failed!.message).to.match(new RegExp(`^kubernetes: cannot load ${join(dir, 'no-such-kubeconfig')}: .*ENOENT`));
    rmSync(dir, { recursive: true, force: true });
  });

  it('takes server_url as an http or https address, and names a mistake in it', () => {
    const local = 'projects:\n- name: main\n  backends:\n  - type: local\n';
    const dir = tempDir();
    writeFileSync(join(dir, 'config.yml'), `server_url: https://orchestrator.example.com/\n${local}`);
    expect(loadServerConfig(join(dir, 'config.yml')).server_url).to.equal('https://orchestrator.example.com/');
    rmSync(dir, { recursive: true, force: true });
    for (const wrong of ['orchestrator.example.com', 'ftp://orchestrator.example.com', 'https://user:pass@orchestrator.example.com']) {
      expect(configError(`server_url: ${wrong}\n${local}`)).to.equal(
        `invalid server config:\nconfig.yml:1:13: server_url: expected the http:// or https:// address this server is reached at from other machines, such as https://orchestrator.example.com, got "${wrong}"`);
    }
  });

  it('names the mistakes of a kubernetes backend\'s settings', () => {
    const backend = 'projects:\n- name: main\n  backends:\n  - type: kubernetes\n';
    expect(configError(`${backend}    unschedulable_timeout: 5 minutes\n`)).to.match(/^config\.yml:5:28: projects\[0\]\.backends\[0\]\.unschedulable_timeout: invalid duration/m);
    expect(configError(`${backend}    agent_address: proxy\n`)).to.match(/^config\.yml:5:20: projects\[0\]\.backends\[0\]\.agent_address: /m);
    expect(configError(`${backend}    kubeconfig: /no/such/kubeconfig\n`)).to.equal(
      'invalid server config:\nconfig.yml:5:17: projects[0].backends[0].kubeconfig: no such file /no/such/kubeconfig');
    expect(configError(`${backend}    namespace: GPU_Pods\n`)).to.match(/^config\.yml:5:16: projects\[0\]\.backends\[0\]\.namespace: /m);
  });

  it('refuses a config whose aliases expand exponentially, naming the file, without a stack trace', async () => {
    const dir = tempDir();
    const path = join(dir, 'config.yml');
    const levels = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'];
    for (const name of 'bcdefghi') {
      const previous = String.fromCharCode(name.charCodeAt(0) - 1);
      levels.push(`${name}: &${name} [${Array(9).fill(`*${previous}`).join(', ')}]`);
    }
    writeFileSync(path, `${levels.join('\n')}\nprojects: *i\n`);
    const server = await serverProcess(dir, 0);
    expect(server.code).to.equal(1);
    expect(server.stderr).to.include(`${path}: too many aliases`);
    expect(server.stderr).to.not.match(/\n\s+at /);
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses to start on an invalid config with one error line and no stack trace', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'config.yml'), 'projects:\n- name: main\n  backends:\n  - type: local\n    region: mars\n');
    const server = await serverProcess(dir, 0);
    expect(server.code).to.equal(1);
    expect(server.stderr).to.match(/^error: invalid server config:\n.*config\.yml:5:13: projects\[0\]\.backends\[0\]\.region: unknown field$/m);
    expect(server.stderr).to.not.match(/\n\s+at /);
    rmSync(dir, { recursive: true, force: true });
  });

  it('refuses a second server on the same folder in one line naming the first one\'s pid, before opening the database; a killed server\'s hold is taken over', async function () {
    this.timeout(120_000); // two new databases, each about 10 s of initdb on a quiet machine
    const dir = tempDir();
    const other = tempDir();
    try {
      const first = await serverProcess(dir, await freePort());
      expect(first.code, first.stderr).to.equal(null);
      const second = await serverProcess(dir, await freePort());
      expect(second.code, second.stdout).to.equal(1);
      expect(second.stderr).to.equal(`error: the embedded database in ${join(dir, 'data')} is in use by the server with pid ${first.pid}; stop it, or use --server-dir / ORCHESTRATOR_DATABASE_URL\n`);
      const elsewhere = await serverProcess(dir, await freePort(), ['--server-dir', other]);
      expect(elsewhere.stdout).to.contain(`Applied config: ${join(other, 'config.yml')}`);
      await elsewhere.stop();

      process.kill(first.pid, 'SIGKILL');
      await new Promise((resolve) => setTimeout(resolve, 500));
      const after = await serverProcess(dir, await freePort());
      expect(after.code, after.stderr).to.equal(null);
      await after.stop();
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(other, { recursive: true, force: true });
    }
  });

  it('makes a new embedded database apart and moves it into place whole: a server killed meanwhile leaves neither a half-made database nor its initdb, and the next start makes it', async function () {
    this.timeout(180_000);
    const dir = tempDir();
    try {
      const killed = spawn(process.execPath, ['dist/cli/main.js', 'server', '--port', String(await freePort())], {
        env: { ...process.env, ORCHESTRATOR_SERVER_DIR: dir, ORCHESTRATOR_DATABASE_URL: '', ORCHESTRATOR_LOG_LEVEL: 'error' }, stdio: 'ignore',
      });
      started.push(killed);
      const making = join(dir, 'data.initdb');
      for (let waited = 0; !existsSync(making); waited += 20) {
        expect(waited, 'the server made no data.initdb beside data').to.be.below(60_000);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      killed.kill('SIGKILL');
      for (let waited = 0; processesNaming(making).length > 0; waited += 100) {
        expect(waited, 'the initdb process outlived its server').to.be.below(10_000);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(existsSync(join(dir, 'data', 'PG_VERSION'))).to.equal(false);

      const after = await serverProcess(dir, await freePort());
      expect(after.code, after.stderr).to.equal(null);
      await after.stop();
      expect(existsSync(join(dir, 'data', 'PG_VERSION'))).to.equal(true);
      expect(existsSync(making)).to.equal(false);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses to make its database in a data folder that holds other files, and leaves them be', async () => {
    const dir = tempDir();
    try {
      mkdirSync(join(dir, 'data'));
      writeFileSync(join(dir, 'data', 'notes.txt'), 'mine\n');
      const server = await serverProcess(dir, await freePort());
      expect(server.code).to.equal(1);
      expect(server.stderr).to.equal(`error: ${join(dir, 'data')} holds files but no database (no PG_VERSION); move it away, or use --server-dir / ORCHESTRATOR_DATABASE_URL\n`);
      expect(readFileSync(join(dir, 'data', 'notes.txt'), 'utf8')).to.equal('mine\n');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says that its port is taken before it opens the database', async () => {
    const dir = tempDir();
    const holder = createServer();
    const port = await freePort();
    await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', resolve));
    try {
      const server = await serverProcess(dir, port);
      expect(server.code).to.equal(1);
      expect(server.stderr).to.equal(`error: 127.0.0.1:${port} is already in use; is another server running? (--port picks another)\n`);
      expect(existsSync(join(dir, 'data')), 'the database folder').to.equal(false);
    } finally {
      holder.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('prints an unexpected error (a broken database folder) as one line that says where its full trace is, never the library\'s source', async () => {
    const dir = tempDir();
    const home = tempDir();
    try {
      mkdirSync(join(dir, 'data'));
      writeFileSync(join(dir, 'data', 'PG_VERSION'), 'not a version\n');
      const server = await serverProcess(dir, 0, [], { HOME: home });
      expect(server.code).to.equal(1);
      const log = join(home, '.orchestrator', 'errors.log');
      expect(server.stderr).to.match(new RegExp(`^error: [^\\n]+ \\(an unexpected error; its full trace is in ${log.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\)\\n$`));
      expect(server.stderr.length).to.be.below(400);
      expect(readFileSync(log, 'utf8')).to.match(/orchestrator server \(pid \d+\)\n\S.*\n\s+at /);
    } finally {
      rmSync(dir, { recursive: true, force: true });
      rmSync(home, { recursive: true, force: true });
    }
  });

  it('prints its config, admin token and URL, keeps the token across restarts and picks up config changes', async () => {
    const dir = tempDir();
    const port = await freePort();
    const first = await serverProcess(dir, port);
    const token = /Admin token: +(\S+)/.exec(first.stdout)?.[1];
    expect(first.stdout).to.contain(`Applied config: ${join(dir, 'config.yml')}`);
    expect(first.stdout).to.contain(`Server URL:     http://127.0.0.1:${port}`);
    expect(token).to.have.length.greaterThan(30);
    await first.stop();

    writeFileSync(join(dir, 'config.yml'), 'projects:\n- name: main\n  backends:\n  - type: local\n- name: research\n  backends:\n  - type: local\n');
    const second = await serverProcess(dir, port);
    expect(/Admin token: +(\S+)/.exec(second.stdout)?.[1]).to.equal(token);
    const projects = await (await fetch(`http://127.0.0.1:${port}/api/projects`, { headers: { authorization: `Bearer ${token}` } })).json() as { name: string }[];
    expect(projects.map((p) => p.name)).to.deep.equal(['main', 'research']);
    await second.stop();
    expect(existsSync(join(dir, 'data'))).to.equal(true);
    rmSync(dir, { recursive: true, force: true });
  });
});
