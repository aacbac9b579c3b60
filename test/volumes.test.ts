import { expect } from 'chai';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Run } from '../api/objects.js';
import { endCliSuite, runCli, show, startLocalCliSuite, type CliResult, type LocalCliSuite } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { ensurePodman, TEST_IMAGE } from './helpers/podman.js';
import { LOCAL_DOCKER_CONFIG } from './helpers/server.js';

/** Writes the YAML into the suite's work folder and applies it, following the run to its end. */
async function applyTask(suite: LocalCliSuite, name: string, yaml: string): Promise<CliResult> {
  const file = join(suite.work, `${name}.yml`);
  writeFileSync(file, `type: task\nname: ${name}\n${yaml}`);
  return runCli(['apply', '-f', file, '-y', '--no-ssh-config'], { home: suite.home.home, cwd: suite.work, timeoutMs: 90_000 });
}

async function runOf(suite: LocalCliSuite, name: string): Promise<Run> {
  return (await suite.server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
}

for (const kind of DATABASE_KINDS) {
  describe(`volumes: instance directories linked into process jobs (local backend, ${kind})`, function () {
    this.timeout(120_000);
    let suite: LocalCliSuite;
    let instanceDir: string;

    before(async () => {
      suite = await startLocalCliSuite(kind);
      instanceDir = mkdtempSync(join(tmpdir(), 'orch-volume-'));
      writeFileSync(join(instanceDir, 'weights.txt'), 'cached weights\n');
    });
    after(async () => {
      await endCliSuite(suite?.server, suite?.home, suite?.work);
      if (instanceDir) rmSync(instanceDir, { recursive: true, force: true });
    });

    it('links a volume (short and long form) where the job reads and writes the instance directory', async () => {
      const result = await applyTask(suite, 'linked', [
        'volumes:',
        `  - ${instanceDir}:/workflow/cache`,
        `  - {instance_path: ${instanceDir}, path: /workflow/models/again}`,
        'commands:',
        '  - cat cache/weights.txt',
        '  - cat models/again/weights.txt',
        '  - echo written by the job > cache/out.txt',
      ].join('\n'));
      expect(result.code, show(result)).to.equal(0);
      expect(result.stdout).to.contain('cached weights\ncached weights\n');
      expect(readFileSync(join(instanceDir, 'out.txt'), 'utf8')).to.equal('written by the job\n');
    });

    it('fails the run when a non-optional instance path is missing, and runs without an optional one', async () => {
      const missing = join(instanceDir, 'not-there');
      const failed = await applyTask(suite, 'missing', `volumes:\n  - ${missing}:/workflow/data\ncommands:\n  - echo should not run\n`);
      expect(failed.code, show(failed)).to.not.equal(0);
      const run = await runOf(suite, 'missing');
      expect(run.status, show(failed)).to.equal('failed');
      expect(run.statusMessage).to.contain(`the volume ${missing}:/workflow/data cannot be mounted: ${missing} is not a directory on this instance`);
      expect(failed.stdout).to.not.contain('should not run');

      const optional = await applyTask(suite, 'optional', `volumes:\n  - {instance_path: ${missing}, path: /workflow/data, optional: true}\ncommands:\n  - test ! -e data && echo ran without it\n`);
      expect(optional.code, show(optional)).to.equal(0);
      expect(optional.stdout).to.contain('ran without it');
    });

    it('refuses a place outside /workflow, which a process job does not have', async () => {
      const result = await applyTask(suite, 'outside', `volumes:\n  - ${instanceDir}:/root/.cache\ncommands:\n  - "true"\n`);
      expect(result.code, show(result)).to.not.equal(0);
      expect((await runOf(suite, 'outside')).statusMessage).to.contain('the volume path /root/.cache is outside /workflow; the process runtime has no container');
    });

    it('refuses named network volumes with one line that says so', async () => {
      const short = await applyTask(suite, 'named', 'volumes:\n  - my-volume:/data\ncommands:\n  - "true"\n');
      expect(short.code, show(short)).to.not.equal(0);
      expect(short.stderr).to.contain('"my-volume" names a network volume, which is not supported; mount a directory of the instance instead, such as "/mnt/my-volume:/data"');
      const long = await applyTask(suite, 'named-map', 'volumes:\n  - {name: my-volume, path: /data}\ncommands:\n  - "true"\n');
      expect(long.code, show(long)).to.not.equal(0);
      expect(long.stderr).to.match(/volumes\[0\]/);
      expect((await suite.server.api('GET', '/api/projects/main/runs/named')).status).to.equal(404);
    });
  });
}

describe('volumes: bind mounts into containers (local backend, runtime docker on Podman)', function () {
  this.timeout(180_000);
  let suite: LocalCliSuite;
  let instanceDir: string;
  const previousDockerHost = process.env.DOCKER_HOST;

  before(async () => {
    process.env.DOCKER_HOST = await ensurePodman();
    suite = await startLocalCliSuite('pglite', LOCAL_DOCKER_CONFIG);
    instanceDir = mkdtempSync(join(tmpdir(), 'orch-volume-'));
    mkdirSync(join(instanceDir, 'sub'));
    writeFileSync(join(instanceDir, 'sub', 'weights.txt'), 'cached weights\n');
  });
  after(async () => {
    await endCliSuite(suite?.server, suite?.home, suite?.work);
    if (instanceDir) rmSync(instanceDir, { recursive: true, force: true });
    if (previousDockerHost === undefined) delete process.env.DOCKER_HOST;
    else process.env.DOCKER_HOST = previousDockerHost;
  });

  it('mounts the instance directory at any container path, and fails clearly when it is missing', async () => {
    const mounted = await applyTask(suite, 'mounted', [
      `image: ${TEST_IMAGE}`,
      'volumes:',
      `  - ${instanceDir}:/root/.cache`,
      'commands:',
      '  - cat /root/.cache/sub/weights.txt',
      '  - echo from the container > /root/.cache/out.txt',
    ].join('\n'));
    expect(mounted.code, show(mounted)).to.equal(0);
    expect(mounted.stdout).to.contain('cached weights');
    expect(readFileSync(join(instanceDir, 'out.txt'), 'utf8')).to.equal('from the container\n');

    const missing = join(instanceDir, 'not-there');
    const failed = await applyTask(suite, 'unmounted', `image: ${TEST_IMAGE}\nvolumes:\n  - ${missing}:/data\ncommands:\n  - "true"\n`);
    expect(failed.code, show(failed)).to.not.equal(0);
    expect((await runOf(suite, 'unmounted')).statusMessage).to.contain(`${missing} is not a directory on this instance`);
  });
});
