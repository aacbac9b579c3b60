import { expect } from 'chai';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Run } from '../api/objects.js';
import { addProject, endCliSuite, makeHome, runCli, show, type CliResult, type LocalCliSuite } from './helpers/cli.js';
import { ensurePodman, TEST_IMAGE } from './helpers/podman.js';
import { freePort } from './helpers/ports.js';
import { eventually, startTestServer } from './helpers/server.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** scripts/podman-setup.sh writes it; containers cannot start on the test machines without it. */
const CONTAINERS_CONF = '/tmp/orch-podman/containers.conf';

function spawnQuiet(command: string, args: string[], env: NodeJS.ProcessEnv = process.env): ChildProcess {
  return spawn(command, args, { stdio: 'ignore', env });
}

async function answers(url: string): Promise<boolean> {
  return fetch(url).then(() => true, () => false);
}

/**
 * Debian's docker-registry (the reference registry) on a loopback port with htpasswd authentication, and a
 * Podman API service of the test's own that may reach it over plain HTTP (registries.conf: insecure).
 */
class PrivateRegistry {
  private constructor(readonly scratch: string, readonly address: string, readonly dockerHost: string, private readonly children: ChildProcess[]) {}

  static async start(username: string, password: string): Promise<PrivateRegistry> {
    await ensurePodman();
    const scratch = mkdtempSync(join(tmpdir(), 'orch-registry-'));
    const address = `127.0.0.1:${await freePort()}`;
    writeFileSync(join(scratch, 'htpasswd'), execFileSync('htpasswd', ['-Bbn', username, password]));
    writeFileSync(join(scratch, 'config.yml'), [
      'version: 0.1',
      'log: {level: error}',
      `storage: {filesystem: {rootdirectory: ${join(scratch, 'data')}}}`,
      `http: {addr: "${address}"}`,
      `auth: {htpasswd: {realm: orchestrator-test, path: ${join(scratch, 'htpasswd')}}}`,
    ].join('\n'));
    writeFileSync(join(scratch, 'registries.conf'), `[[registry]]\nlocation = "${address}"\ninsecure = true\n`);
    const socket = join(scratch, 'podman.sock');
    const children = [
      spawnQuiet('docker-registry', ['serve', join(scratch, 'config.yml')]),
      spawnQuiet('podman', ['system', 'service', '--time=0', `unix://${socket}`],
        { ...process.env, CONTAINERS_CONF, CONTAINERS_REGISTRIES_CONF: join(scratch, 'registries.conf') }),
    ];
    const registry = new PrivateRegistry(scratch, address, `unix://${socket}`, children);
    await eventually(() => answers(`http://${address}/v2/`), 10_000, 'docker-registry to answer');
    await eventually(async () => {
      try {
        execFileSync('podman', ['--url', registry.dockerHost, 'version'], { stdio: 'ignore' });
        return true;
      } catch {
        return false;
      }
    }, 10_000, 'the Podman service to answer');
    return registry;
  }

  /** Pushes the local test image under `name` with the right credentials, then removes it locally so that a run must pull it. */
  push(name: string, username: string, password: string): string {
    const image = `${this.address}/${name}`;
    execFileSync('podman', ['tag', TEST_IMAGE, image]);
    execFileSync('podman', ['push', '--quiet', '--tls-verify=false', '--creds', `${username}:${password}`, image]);
    execFileSync('podman', ['rmi', image], { stdio: 'ignore' });
    return image;
  }

  stop(): void {
    for (const child of this.children) child.kill();
    rmSync(this.scratch, { recursive: true, force: true });
  }
}

describe('registry_auth: pulls from a private registry with htpasswd (Debian docker-registry, runtime docker on Podman)', function () {
  this.timeout(180_000);
  let registry: PrivateRegistry;
  let suite: LocalCliSuite;
  let image: string;
  const previousDockerHost = process.env.DOCKER_HOST;

  async function apply(name: string, yaml: string): Promise<CliResult> {
    const file = join(suite.work, `${name}.yml`);
    writeFileSync(file, `type: task\nname: ${name}\nimage: ${image}\ncommands:\n  - echo pulled and running\n${yaml}`);
    return runCli(['apply', '-f', file, '-y', '--no-ssh-config'], { home: suite.home.home, cwd: suite.work, timeoutMs: 90_000, env: { REGISTRY_USER: 'bot' } });
  }

  before(async () => {
    registry = await PrivateRegistry.start('bot', 's3cret');
    image = registry.push(`private/busybox:${randomUUID().slice(0, 8)}`, 'bot', 's3cret');
    process.env.DOCKER_HOST = registry.dockerHost;
    const server = await startTestServer('pglite', 'projects:\n- name: main\n  backends:\n  - type: local\n    runtime: docker\n');
    const home = makeHome();
    suite = { server, home, work: mkdtempSync(join(tmpdir(), 'orch-registry-work-')) };
    await addProject(home.home, server.url);
    const fleet = await runCli(['apply', '-f', 'examples/fleets/local.yml', '-y'], { home: home.home, cwd: REPO_ROOT });
    expect(fleet.code, show(fleet)).to.equal(0);
  });
  after(async () => {
    await endCliSuite(suite?.server, suite?.home, suite?.work);
    if (image) {
      try {
        execFileSync('podman', ['rmi', image], { stdio: 'ignore' });
      } catch {
        // Never pulled: nothing to remove.
      }
    }
    registry?.stop();
    if (previousDockerHost === undefined) delete process.env.DOCKER_HOST;
    else process.env.DOCKER_HOST = previousDockerHost;
  });

  it('fails the run with a message naming the registry when the password is wrong', async () => {
    const result = await apply('wrong-password', 'registry_auth: {username: bot, password: not-the-password}\n');
    expect(result.code, show(result)).to.not.equal(0);
    const run = (await suite.server.api('GET', '/api/projects/main/runs/wrong-password')).body as Run;
    expect(run.status).to.equal('failed');
    expect(run.statusMessage).to.contain(`could not pull image ${image} from registry ${registry.address} as bot:`);
    expect(run.statusMessage).to.match(/unauthorized/);
    expect(run.statusMessage).to.not.contain('not-the-password');
  });

  it('pulls with the username from the environment and the password from a project secret', async () => {
    const secret = await runCli(['secret', 'set', 'REGISTRY_PASSWORD', 's3cret'], { home: suite.home.home });
    expect(secret.code, show(secret)).to.equal(0);
    const result = await apply('right-password', 'registry_auth:\n  username: ${{ env.REGISTRY_USER }}\n  password: ${{ secrets.REGISTRY_PASSWORD }}\n');
    expect(result.code, show(result)).to.equal(0);
    expect(result.stdout).to.contain('pulled and running');
    const run = (await suite.server.api('GET', '/api/projects/main/runs/right-password')).body as Run;
    expect(run.spec.registry_auth).to.deep.equal({ username: 'bot', password: '${{ secrets.REGISTRY_PASSWORD }}' });
  });
});
