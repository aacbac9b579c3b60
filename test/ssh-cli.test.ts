import { expect } from 'chai';
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import type { Run, SshKey } from '../api/objects.js';
import { addProject, CLI_MAIN, endCliSuite, makeHome, runCli, show, startCli, startLocalCliSuite, type CliResult } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually, type TestServer } from './helpers/server.js';
import { Terminal } from './helpers/terminal.js';

/**
 * The real OpenSSH client (`ssh`, `scp`), reading the config under `home` as it would with that home; never asks anything.
 * Never spawnSync: the server under test runs in this process.
 */
function openssh(program: 'ssh' | 'scp', home: string, args: string[]): Promise<CliResult> {
  const child = spawn(program, ['-F', join(home, '.ssh', 'config'), '-o', 'BatchMode=yes', ...args],
    { env: { PATH: process.env.PATH ?? '', HOME: home, LANG: 'C.UTF-8' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk; });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk; });
  return new Promise((resolvePromise, reject) => {
    child.once('error', reject);
    child.once('close', (code, signal) => resolvePromise({ code, signal, stdout, stderr }));
  });
}

const ssh = (home: string, host: string, command: string) => openssh('ssh', home, [host, command]);

/** Opens the server's SSH WebSocket of a run as `token`; the status and error body of a refusal, or 101. */
function sshUpgrade(server: TestServer, path: string, token: string | null): Promise<{ status: number; body: any }> {
  const url = `${server.url.replace(/^http/, 'ws')}${path}`;
  const socket = new WebSocket(url, { headers: token === null ? {} : { authorization: `Bearer ${token}` } });
  return new Promise((resolvePromise, reject) => {
    socket.once('open', () => {
      socket.terminate();
      resolvePromise({ status: 101, body: null });
    });
    socket.once('unexpected-response', (_request, response) => {
      let text = '';
      response.setEncoding('utf8').on('data', (chunk: string) => { text += chunk; }).on('end', () => resolvePromise({ status: response.statusCode!, body: JSON.parse(text) }));
    });
    socket.once('error', reject);
  });
}

const fingerprintOf = (publicKeyPath: string) => spawnSync('ssh-keygen', ['-l', '-f', publicKeyPath], { encoding: 'utf8' }).stdout.split(' ')[1];

for (const kind of DATABASE_KINDS) {
  describe(`ssh into runs through the CLI (${kind})`, function () {
    this.timeout(120_000);
    let server: TestServer;
    let home: ReturnType<typeof makeHome>;
    let work: string;
    const cli = (args: string[]) => runCli(args, { home: home.home, cwd: work });
    const task = (name: string, body: string) => {
      const file = join(work, `${name}.yml`);
      writeFileSync(file, `type: task\nname: ${name}\n${body}`);
      return file;
    };
    const newUser = async (name: string): Promise<string> => {
      const created = await server.api('POST', '/api/users', { name });
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      return created.body.token as string;
    };
    const sshDir = () => join(home.home, '.orchestrator', 'ssh');

    before(async function () {
      this.timeout(120_000);
      ({ server, home, work } = await startLocalCliSuite(kind));
    });

    after(async function () {
      this.timeout(60_000);
      await endCliSuite(server, home, work);
    });

    it('apply makes the key pair once and registers it, and puts the Include at the top of ~/.ssh/config once, saying so, for the first run reached over SSH', async () => {
      mkdirSync(join(home.home, '.ssh'), { mode: 0o700 });
      writeFileSync(join(home.home, '.ssh', 'config'), 'Host elsewhere\n  User someone\n', { mode: 0o644 });
      const first = await cli(['apply', '-f', task('quick', 'commands: ["echo hi"]\n'), '-y']);
      expect(first.code, show(first)).to.equal(0);
      expect(first.stderr, 'a task that lives a moment: no SSH hint, ~/.ssh/config left alone').not.to.match(/Include|To connect via SSH/);
      expect(readFileSync(join(home.home, '.ssh', 'config'), 'utf8')).to.equal('Host elsewhere\n  User someone\n');
      const forwarded = await cli(['apply', '-f', task('forwarded', 'ports: [8000]\ncommands: ["echo hi"]\n'), '-y', '-d']);
      expect(forwarded.code, show(forwarded)).to.equal(0);
      const include = `Include ${join(sshDir(), 'config')}`;
      expect(forwarded.stderr).to.contain(`added "${include}" at the top of ${join(home.home, '.ssh', 'config')}`);

      const privateKey = join(sshDir(), 'id_ed25519');
      expect(statSync(privateKey).mode & 0o777).to.equal(0o600);
      const publicKey = readFileSync(`${privateKey}.pub`, 'utf8').trim();
      expect(publicKey).to.match(/^ssh-ed25519 AAAA\S+ orchestrator /);
      const registered = (await server.api('GET', '/api/users/me/ssh-keys')).body as SshKey[];
      expect(registered).to.deep.equal([{ fingerprint: fingerprintOf(`${privateKey}.pub`), publicKey, createdAt: registered[0]!.createdAt }]);
      const userConfig = readFileSync(join(home.home, '.ssh', 'config'), 'utf8');
      expect(userConfig.split('\n').slice(0, 2)).to.deep.equal(['# Added by orchestrator: ssh <run> reaches the runs of your projects.', include]);
      expect(userConfig).to.contain('Host elsewhere\n  User someone\n');
      expect(statSync(join(home.home, '.ssh', 'config')).mode & 0o777).to.equal(0o644);

      const again = await cli(['apply', '-f', task('forwarded', 'ports: [8000]\ncommands: ["echo hi"]\n'), '-y', '-d']);
      expect(again.code, show(again)).to.equal(0);
      expect(again.stderr).not.to.contain('Include');
      expect(readFileSync(`${privateKey}.pub`, 'utf8').trim()).to.equal(publicKey);
      expect((await server.api('GET', '/api/users/me/ssh-keys')).body).to.have.length(1);
      expect(readFileSync(join(home.home, '.ssh', 'config'), 'utf8')).to.equal(userConfig);
    });

    it('leaves ~/.ssh/config alone with --no-ssh-config or ORCHESTRATOR_NO_SSH_CONFIG=1, and still registers the key', async () => {
      for (const [args, env] of [[['--no-ssh-config'], {}], [[], { ORCHESTRATOR_NO_SSH_CONFIG: '1' }]] as const) {
        const other = makeHome();
        try {
          await addProject(other.home, server.url);
          const result = await runCli(['apply', '-f', task('forwarded', 'ports: [8000]\ncommands: ["echo hi"]\n'), '-y', '-d', ...args], { home: other.home, cwd: work, env });
          expect(result.code, show(result)).to.equal(0);
          expect(result.stderr).not.to.contain('Include');
          expect(() => statSync(join(other.home, '.ssh'))).to.throw();
          const publicKey = readFileSync(join(other.home, '.orchestrator', 'ssh', 'id_ed25519.pub'), 'utf8').trim();
          expect(((await server.api('GET', '/api/users/me/ssh-keys')).body as SshKey[]).map((k) => k.publicKey)).to.include(publicKey);
        } finally {
          other.remove();
        }
      }
    });

    it('attach --logs ends with the run\'s final status and exits with the task\'s exit code, as an attached apply does', async () => {
      const release = join(work, 'release-attached');
      const commands = `commands: ["echo started", "until [ -f ${release} ]; do sleep 0.1; done", "exit 7"]\n`;
      const applied = await cli(['apply', '-f', task('attached', commands), '-y', '-d']);
      expect(applied.code, show(applied)).to.equal(0);
      await eventually(async () => (await server.api('GET', '/api/projects/main/runs/attached')).body.status === 'running', 30_000, 'the task to run');
      const attach = startCli(['attach', 'attached', '--logs'], { home: home.home, cwd: work });
      await attach.waitFor(/^started$/m);
      writeFileSync(release, '');
      const ended = await attach.done;
      expect(ended.code, show(ended)).to.equal(7);
      expect(ended.stderr).to.match(/(^|\n)failed: exited with code 7\n$/);
    });

    it('on a terminal, asks about ~/.ssh/config only for a run reached over SSH, not for a plain task', async () => {
      const other = makeHome();
      const terminal = new Terminal();
      try {
        await addProject(other.home, server.url);
        await terminal.start(['apply', '-f', task('asked', 'commands: ["echo hi"]\n')], other.home, work);
        await terminal.waitFor(/Submit task asked\? \[y\/N\]\s*$/m);
        await terminal.press('y', 'Enter');
        const screen = await terminal.waitFor(/^exited \d+$/m);
        expect(screen, screen).to.match(/^exited 0$/m);
        expect(screen, screen).not.to.contain('.ssh/config');
        await terminal.close();

        await terminal.start(['apply', '-f', task('asked-port', 'ports: [8000]\ncommands: ["echo hi"]\n'), '-d'], other.home, work);
        await terminal.waitFor(/Submit task asked-port\? \[y\/N\]\s*$/m);
        await terminal.press('y', 'Enter');
        await terminal.waitFor(/^Add "Include .+" at the top of .+\.ssh\/config, so that "ssh <run>" reaches your runs\? \[y\/N\]\s*$/m);
        await terminal.press('n', 'Enter');
        expect(await terminal.waitFor(/^exited \d+$/m)).to.match(/^exited 0$/m);
      } finally {
        await terminal.close();
        other.remove();
      }
    });

    it('takes a key as one OpenSSH public key line only (422 otherwise), the same key twice as one', async () => {
      const token = await newUser('keyholder');
      const put = (publicKey: unknown) => server.api('PUT', '/api/users/me/ssh-keys', { publicKey }, token);
      const generated = spawnSync('sh', ['-c', `d=$(mktemp -d) && ssh-keygen -q -t ed25519 -N '' -C 'laptop key' -f $d/k && cat $d/k.pub $d/k && rm -r $d`], { encoding: 'utf8' }).stdout;
      const [publicLine, ...privateLines] = generated.split('\n');
      const created = await put(publicLine);
      expect(created.status, JSON.stringify(created.body)).to.equal(201);
      expect(created.body.publicKey).to.equal(publicLine);
      expect(created.body.fingerprint).to.match(/^SHA256:[A-Za-z0-9+/]{43}$/);
      const same = await put(`  ${publicLine}\n`);
      expect(same.status).to.equal(200);
      expect(same.body).to.deep.equal(created.body);

      const [type, base64] = publicLine!.split(' ');
      const refused: Array<[unknown, RegExp]> = [
        ['hello', /expected one line of OpenSSH public key form/],
        ['not a key', /not a valid OpenSSH public key/],
        [`${type} ${base64!.slice(0, 40)}`, /not a valid OpenSSH public key/],
        [`ssh-rsa ${base64}`, /not a valid OpenSSH public key/],
        [`${publicLine}\n${publicLine}`, /expected one line/],
        [privateLines.join('\n'), /expected one line/],
        [`${publicLine} ${'x'.repeat(16 * 1024)}`, /longer than 16384 bytes/],
        [42, /publicKey: Expected string/],
      ];
      for (const [body, message] of refused) {
        const answer = await put(body);
        expect(answer.status, JSON.stringify(answer.body)).to.equal(422);
        expect(answer.body.error.message).to.match(message);
      }
      expect((await server.api('GET', '/api/users/me/ssh-keys', undefined, token)).body).to.have.length(1);
    });

    it('refuses the SSH WebSocket in the API\'s error shape: no token 401, not a member 403, no such run 404, a run that does not run 409', async () => {
      const outsider = await newUser('outsider');
      const failed = await cli(['apply', '-f', task('never-ran', 'resources: {gpu: H100}\ncommands: [nvidia-smi]\n'), '-y', '--queue']);
      expect(failed.code, show(failed)).to.equal(1);
      const path = '/api/projects/main/runs/never-ran/ssh';
      expect(await sshUpgrade(server, path, null)).to.deep.include({ status: 401 });
      expect((await sshUpgrade(server, path, 'not-a-token')).body.error.code).to.equal('unauthorized');
      expect(await sshUpgrade(server, path, outsider)).to.deep.equal({
        status: 403, body: { error: { code: 'forbidden', message: 'you are not a member of project main' } },
      });
      expect(await sshUpgrade(server, '/api/projects/main/runs/no-such-run/ssh', server.adminToken)).to.deep.equal({
        status: 404, body: { error: { code: 'not_found', message: 'run no-such-run not found in project main' } },
      });
      expect(await sshUpgrade(server, path, server.adminToken)).to.deep.equal({
        status: 409, body: { error: { code: 'not_running', message: 'run never-ran is failed; ssh reaches a run only while it runs' } },
      });
      expect((await sshUpgrade(server, `${path}?replica=x`, server.adminToken)).status).to.equal(400);
      expect((await server.api('GET', '/api/projects/main/runs/never-ran')).body.ssh).to.equal(null);

      const proxy = await runCli(['ssh-proxy', 'never-ran'], { home: home.home });
      expect(proxy.code, show(proxy)).to.equal(255);
      expect(proxy.stderr).to.equal('error: run never-ran is failed; ssh reaches a run only while it runs\n');
    });

    it('ssh <run> with the real OpenSSH client enters the running task: its env and work dir; the entry goes once the run ended and the CLI refreshed; a non-member and a deleted key are refused', async () => {
      const apply = startCli(['apply', '-f', task('box', 'commands: ["pwd", "sleep 300"]\n'), '-y'], { home: home.home, cwd: work });
      await apply.waitFor(/To connect via SSH: +ssh box\n/);
      await eventually(async () => apply.stdout().endsWith('\n'), 10_000, 'the task to print its work dir');
      const workDir = apply.stdout().trim();
      const run = (await server.api('GET', '/api/projects/main/runs/box')).body as Run;
      expect(run.ssh).to.deep.include({ hostAlias: 'orchestrator.main.box', replicas: [] });
      const [hostKey] = run.ssh!.hostKeys;
      expect(hostKey).to.match(/^ssh-ed25519 AAAA/);

      const config = readFileSync(join(sshDir(), 'config'), 'utf8');
      expect(config).to.contain([
        'Host box',
        '  HostName box',
        `  IdentityFile ${join(sshDir(), 'id_ed25519')}`,
        '  IdentitiesOnly yes',
        `  ProxyCommand ${process.execPath} ${CLI_MAIN} ssh-proxy box --project main`,
        '  HostKeyAlias orchestrator.main.box',
        `  UserKnownHostsFile ${join(sshDir(), 'known_hosts')}`,
        '  StrictHostKeyChecking yes',
      ].join('\n'));
      expect(readFileSync(join(sshDir(), 'known_hosts'), 'utf8')).to.equal(`orchestrator.main.box ${hostKey}\n`);

      const entered = await ssh(home.home, 'box', 'echo $ORCHESTRATOR_RUN_NAME; pwd');
      expect(entered.code, show(entered)).to.equal(0);
      expect(entered.stdout).to.equal(`box\n${workDir}\n`);

      /** `ssh box` from another user's home (their token, their keys) with the admin's ~/.ssh/config, and so the admin's key. */
      const sshWithAdminConfig = async (otherHome: string) => {
        mkdirSync(join(otherHome, '.ssh'));
        writeFileSync(join(otherHome, '.ssh', 'config'), readFileSync(join(home.home, '.ssh', 'config')));
        return ssh(otherHome, 'box', 'true');
      };

      const viaCli = await runCli(['ssh', 'box', '--', 'echo', '$ORCHESTRATOR_RUN_NAME'], { home: home.home });
      expect(viaCli.code, show(viaCli)).to.equal(0);
      expect(viaCli.stdout).to.equal('box\n');

      writeFileSync(join(work, 'sent.txt'), 'carried by scp\n');
      const copied = await openssh('scp', home.home, [join(work, 'sent.txt'), 'box:']);
      expect(copied.code, show(copied)).to.equal(0);
      expect(readFileSync(join(workDir, 'sent.txt'), 'utf8')).to.equal('carried by scp\n');

      const member = makeHome();
      try {
        const token = await newUser('member');
        expect((await server.api('POST', '/api/projects/main/members', { user: 'member' })).status).to.equal(201);
        await addProject(member.home, server.url, token);
        const own = await runCli(['ssh-config'], { home: member.home });
        expect(own.code, show(own)).to.equal(0);
        expect(own.stdout).to.equal('box\n');
        // The member's ProxyCommand, but the admin's key: the agent lets in only the member's keys.
        const wrongKey = await sshWithAdminConfig(member.home);
        expect(wrongKey.code, show(wrongKey)).to.equal(255);
        expect(wrongKey.stderr).to.contain('Permission denied (publickey)');
      } finally {
        member.remove();
      }

      const outsider = makeHome();
      try {
        // project add would refuse a project its user is not a member of; the file is what a removed member keeps.
        mkdirSync(join(outsider.home, '.orchestrator'));
        writeFileSync(join(outsider.home, '.orchestrator', 'config.yml'), `projects:\n- {name: main, url: '${server.url}', token: ${await newUser('stranger')}, default: true}\n`);
        const refused = await sshWithAdminConfig(outsider.home);
        expect(refused.code, show(refused)).to.equal(255);
        expect(refused.stderr).to.contain('error: you are not a member of project main');
      } finally {
        outsider.remove();
      }

      const fingerprint = fingerprintOf(join(sshDir(), 'id_ed25519.pub'))!;
      const listed = await cli(['ssh-key', 'list']);
      expect(listed.code, show(listed)).to.equal(0);
      expect(listed.stdout.split('\n')[1]).to.match(new RegExp(`^${fingerprint.replace(/[+/]/g, '\\$&')}\\s+orchestrator \\S+\\s+.+\\s+this machine$`));
      const deleted = await cli(['ssh-key', 'delete', fingerprint]);
      expect(deleted.code, show(deleted)).to.equal(0);
      expect(deleted.stderr).to.equal(`SSH key ${fingerprint} deleted: it opens no new session into your runs; this machine's key: the next apply, ssh or ssh-config from here registers it again\n`);
      const revoked = await ssh(home.home, 'box', 'true');
      expect(revoked.code, show(revoked)).to.equal(255);
      expect(revoked.stderr).to.contain('Permission denied (publickey)');
      const twice = await cli(['ssh-key', 'delete', fingerprint.slice('SHA256:'.length)]);
      expect([twice.code, twice.stderr]).to.deep.equal([1, `error: you have no SSH key ${fingerprint}\n`]);
      expect((await cli(['ssh-config'])).code).to.equal(0);
      expect((await ssh(home.home, 'box', 'true')).code, 'the key registered again').to.equal(0);

      const detached = await apply.interrupt();
      expect(detached.code, show(detached)).to.equal(130);
      const stopped = await cli(['stop', 'box']);
      expect(stopped.code, show(stopped)).to.equal(0);
      expect(readFileSync(join(sshDir(), 'config'), 'utf8')).to.contain('Host box');
      const ps = await cli(['ps']);
      expect(ps.code, show(ps)).to.equal(0);
      expect(readFileSync(join(sshDir(), 'config'), 'utf8')).not.to.contain('Host box');
      expect(readFileSync(join(sshDir(), 'known_hosts'), 'utf8')).to.equal('');
    });

    it('reaches each running replica of a service as <run>-<n>, and the service itself at its lowest-numbered ready replica', async () => {
      writeFileSync(join(work, 'server.mjs'), "import { createServer } from 'node:http';\ncreateServer((q, s) => s.end('ok')).listen(Number(process.env.PORT));\n");
      writeFileSync(join(work, 'svc.yml'), 'type: service\nname: svc\nport: 8000\nreplicas: 2\nfiles: [server.mjs]\ncommands: [node server.mjs]\n');
      const applied = await cli(['apply', '-f', join(work, 'svc.yml'), '-y']);
      expect(applied.code, show(applied)).to.equal(0);
      expect(applied.stderr).to.contain('To connect via SSH:         ssh svc\n');
      const run = await eventually(async () => {
        const view = (await server.api('GET', '/api/projects/main/runs/svc')).body as Run;
        return view.service!.replicas.filter((replica) => replica.state === 'ready').length === 2 && view;
      }, 60_000, 'both replicas to be ready');
      expect(run.ssh!.hostAlias).to.equal('orchestrator.main.svc');
      expect(run.ssh!.replicas.map((replica) => [replica.replica, replica.hostAlias])).to.deep.equal([[0, 'orchestrator.main.svc.0'], [1, 'orchestrator.main.svc.1']]);
      const refreshed = await cli(['ssh-config']);
      expect(refreshed.stdout).to.equal('svc\nsvc-0\nsvc-1\n');
      const knownHosts = readFileSync(join(sshDir(), 'known_hosts'), 'utf8');
      for (const replica of run.ssh!.replicas) expect(knownHosts).to.contain(`${replica.hostAlias} ${replica.hostKeys[0]}\n`);
      for (const key of run.ssh!.hostKeys) expect(knownHosts).to.contain(`orchestrator.main.svc ${key}\n`);

      const [zero, one, plain] = await Promise.all(['svc-0', 'svc-1', 'svc'].map((host) => ssh(home.home, host, 'pwd')));
      for (const entered of [zero, one, plain]) expect(entered!.code, show(entered!)).to.equal(0);
      expect(zero!.stdout).to.match(/\/work\n$/);
      expect(one!.stdout).not.to.equal(zero!.stdout);
      expect(plain!.stdout).to.equal(zero!.stdout);

      const absent = await runCli(['ssh-proxy', 'svc', '--replica', '7'], { home: home.home });
      expect(absent.code, show(absent)).to.equal(255);
      expect(absent.stderr).to.equal('error: replica 7 of service svc is not running; ssh reaches a run only while it runs\n');

      expect((await cli(['stop', 'svc'])).code).to.equal(0);
      await cli(['ps']);
      expect(readFileSync(join(sshDir(), 'config'), 'utf8')).not.to.match(/^Host svc/m);
    });
  });
}
