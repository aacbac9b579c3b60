import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Run, RunLogsPage } from '../api/objects.js';
import { FINISHED_RUN_STATUSES } from '../api/status.js';
import { endCliSuite, runCli, show, startLocalCliSuite, type LocalCliSuite } from './helpers/cli.js';
import { BASH_TEST_IMAGE, ensureBashImage, ensurePodman, ensureStandInImage, removeStandInImage, TEST_IMAGE, UV_VENV_STAND_IN } from './helpers/podman.js';
import { eventually, LOCAL_DOCKER_CONFIG } from './helpers/server.js';

/** CAP_SYS_ADMIN, which mount needs: a privileged container has it, a default one does not. */
const CAP_SYS_ADMIN = 21n;
const PROBE = ['commands:', '  - grep CapEff /proc/self/status', '  - df -k /dev/shm | tail -n 1'];

/** One task per setting, applied together so that they run side by side on the local fleet's instances. */
const TASKS: Record<string, string[]> = {
  'privileged': [`image: ${TEST_IMAGE}`, 'privileged: true', 'resources:', '  shm_size: 256MB', ...PROBE],
  'unprivileged': [`image: ${TEST_IMAGE}`, ...PROBE],
  'entrypoint': [`image: ${TEST_IMAGE}`, `entrypoint: printf '<%s>\\n'`, 'commands:', '  - one two', '  - $HOME && false'],
  'bash': [`image: ${BASH_TEST_IMAGE}`, 'shell: bash', 'commands:', '  - \'[[ -n "$BASH_VERSION" ]] && echo "bash $BASH_VERSION"\''],
  'ash': [`image: ${TEST_IMAGE}`, 'shell: /bin/ash', 'commands:', '  - echo "shell $0"'],
  'no-bash': [`image: ${TEST_IMAGE}`, 'shell: bash', 'commands:', '  - echo never'],
  'python': ['python: "3.11"', 'commands:', '  - echo "venv $VIRTUAL_ENV"', '  - python --version'],
  'no-python': ['commands:', '  - python --version'],
  'docker': ['docker: true', ...PROBE],
  'nvcc': ['python: "3.10"', 'nvcc: true', 'commands:', '  - nvcc --version', '  - python --version'],
};

/** dstack's Docker-in-Docker image, the default image and its devel variant, which the test machines cannot pull: stand-ins under their names. */
const STAND_INS = { dind: 'docker.io/dstackai/dind:latest', base: 'docker.io/orchestrator/base:cuda-12.8', devel: 'docker.io/orchestrator/base:cuda-12.8-devel' };

describe('container settings: privileged, resources.shm_size, entrypoint, shell, python (local backend, runtime docker on Podman)', function () {
  this.timeout(60_000);
  let suite: LocalCliSuite;
  let planned: string;
  const runs = new Map<string, Run>();
  const output = new Map<string, string>();
  const previousDockerHost = process.env.DOCKER_HOST;

  before(async function () {
    this.timeout(600_000);
    process.env.DOCKER_HOST = await ensurePodman();
    await ensureBashImage();
    await ensureStandInImage(STAND_INS.dind, { 'start-dockerd': 'echo "start-dockerd ran"' });
    await ensureStandInImage(STAND_INS.base, { uv: UV_VENV_STAND_IN });
    await ensureStandInImage(STAND_INS.devel, { nvcc: 'echo "nvcc: NVIDIA (R) Cuda compiler driver (stand-in)"', uv: UV_VENV_STAND_IN });
    suite = await startLocalCliSuite('pglite', LOCAL_DOCKER_CONFIG);
    const file = join(suite.work, 'tasks.yml');
    writeFileSync(file, Object.entries(TASKS).map(([name, lines]) => ['type: task', `name: ${name}`, ...lines, ''].join('\n')).join('---\n'));
    const applied = await runCli(['apply', '-f', file, '-y', '-d', '--no-ssh-config'], { home: suite.home.home, cwd: suite.work });
    expect(applied.code, show(applied)).to.equal(0);
    planned = applied.stderr;
    for (const name of Object.keys(TASKS)) {
      runs.set(name, await eventually(async () => {
        const run = (await suite.server.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
        return FINISHED_RUN_STATUSES.includes(run.status) && run;
      }, 90_000, `${name} to end`));
      const page = (await suite.server.api('GET', `/api/projects/main/runs/${name}/logs`)).body as RunLogsPage;
      output.set(name, page.lines.map((line) => `${line.text}\n`).join(''));
    }
  });
  after(async function () {
    this.timeout(60_000);
    await endCliSuite(suite?.server, suite?.home, suite?.work);
    for (const image of Object.values(STAND_INS)) await removeStandInImage(image);
    if (previousDockerHost === undefined) delete process.env.DOCKER_HOST;
    else process.env.DOCKER_HOST = previousDockerHost;
  });

  const done = (name: string) => {
    expect(runs.get(name)!.status, `${name}: ${runs.get(name)!.statusMessage}\n${output.get(name)}`).to.equal('done');
    return output.get(name)!;
  };

  const sysAdmin = (text: string) => (BigInt(`0x${/CapEff:\s*([0-9a-f]+)/.exec(text)![1]}`) >> CAP_SYS_ADMIN) & 1n;

  it('runs a task with docker: true as dstack does: in dstack\'s Docker-in-Docker image, privileged, start-dockerd before its commands', () => {
    const logged = done('docker');
    expect(logged.split('\n')[0]).to.equal('start-dockerd ran');
    expect(sysAdmin(logged), logged).to.equal(1n);
  });

  it('runs a task with nvcc: true in the default image\'s devel variant, which has the CUDA compiler, in a virtual environment of its python', () => {
    expect(done('nvcc')).to.equal('nvcc: NVIDIA (R) Cuda compiler driver (stand-in)\nPython 3.10 (uv venv -q --prompt orchestrator --python 3.10 --seed /orchestrator/venv)\n');
  });

  it('makes the container privileged and sizes its /dev/shm as asked; without them, the engine\'s defaults', () => {
    const shmKib = (text: string) => Number(/^shm\s+(\d+)/m.exec(text)![1]);
    const [asked, plain] = [done('privileged'), done('unprivileged')];
    expect(sysAdmin(asked), asked).to.equal(1n);
    expect(sysAdmin(plain), plain).to.equal(0n);
    expect(shmKib(asked), asked).to.equal(256 * 1024);
    expect(shmKib(plain), plain).to.be.below(256 * 1024);
    expect(planned, 'the plans list no field as ignored').not.to.match(/ignored/);
  });

  it('passes each command to the entrypoint as one argument, in place of the shell', () => {
    expect(done('entrypoint')).to.equal('<one two>\n<$HOME && false>\n');
  });

  it('runs the commands in bash, or in a shell named by its path, and fails clearly on an image without bash', () => {
    expect(done('bash')).to.match(/^bash \d+\.\d+/);
    expect(done('ash')).to.equal('shell /bin/ash\n');
    const missing = runs.get('no-bash')!;
    expect(missing.status).to.equal('failed');
    expect(missing.statusMessage).to.contain(`the image ${TEST_IMAGE} has no /bin/bash, the run's shell; use an image that has it, or another shell`);
    expect(output.get('no-bash')).to.equal('');
  });

  it('runs a task that gives python and no image in the default image, in a virtual environment of that Python made with uv, as dstack does', () => {
    expect(done('python')).to.equal('venv /orchestrator/venv\nPython 3.11 (uv venv -q --prompt orchestrator --python 3.11 --seed /orchestrator/venv)\n');
  });

  it('runs a task without python or image in a virtual environment of the default image\'s Python 3.12', () => {
    expect(done('no-python')).to.equal('Python 3.12 (uv venv -q --prompt orchestrator --python 3.12 --seed /orchestrator/venv)\n');
  });
});
