import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { copyFileSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentClient } from '../../agent/client.js';
import { removeInstanceContainers } from '../../agent/instance-containers.js';
import { startAgent, type RunningAgent } from '../../agent/server.js';
import { randomToken } from './agent-jobs.js';

/** A busybox image that scripts/podman-setup.sh builds locally (no registry needed). */
export const TEST_IMAGE = 'localhost/orchestrator-test:busybox';
export const PODMAN_DOCKER_HOST = 'unix:///tmp/orch-podman.sock';

const SETUP_SCRIPT = fileURLToPath(new URL('../../scripts/podman-setup.sh', import.meta.url));
/** Installing Podman through apt on a fresh machine takes a minute or two. */
const SETUP_TIMEOUT_MS = 600_000;

let ready: Promise<string> | null = null;

/** Makes sure Podman serves the Docker Engine API and has TEST_IMAGE; returns the DOCKER_HOST value. Runs the setup once per process. */
export function ensurePodman(): Promise<string> {
  ready ??= new Promise<string>((resolve, reject) => {
    execFile('sh', [SETUP_SCRIPT], { timeout: SETUP_TIMEOUT_MS, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) {
        ready = null;
        reject(new Error(`scripts/podman-setup.sh failed: ${error.message}\n${stderr}`));
        return;
      }
      const lines = stdout.trim().split('\n');
      resolve(lines[lines.length - 1] || PODMAN_DOCKER_HOST);
    });
  });
  return ready;
}

export interface PodmanAgent {
  dockerHost: string;
  /** A scratch folder of the test's own; the agent works in `workDir` under it. */
  scratch: string;
  instanceId: string;
  token: string;
  agent: RunningAgent;
  client: AgentClient;
  /** Stops the agent, removes the instance's containers and the scratch folder. */
  stop(): Promise<void>;
}

/** An agent on the docker runtime against Podman, with its own instance id and scratch folder. */
export async function startPodmanAgent(name: string, workDir = '.'): Promise<PodmanAgent> {
  const dockerHost = await ensurePodman();
  const scratch = mkdtempSync(join(tmpdir(), `${name}-`));
  const instanceId = `${name}-${randomUUID().slice(0, 8)}`;
  const token = randomToken();
  const agent = await startAgent({ token, runtime: 'docker', dockerHost, instanceId, workDir: join(scratch, workDir) });
  return {
    dockerHost, scratch, instanceId, token, agent,
    client: new AgentClient(agent.url, token),
    stop: async () => {
      await agent.close();
      await removeInstanceContainers(instanceId, dockerHost);
      rmSync(scratch, { recursive: true, force: true });
    },
  };
}

/** TEST_IMAGE's busybox with this machine's bash beside it, /bin a link to usr/bin as in Debian's images: built by ensureBashImage. */
export const BASH_TEST_IMAGE = 'localhost/orchestrator-test:bash';

/** Builds BASH_TEST_IMAGE from this machine's bash and the libraries it loads (about a second), once per machine. */
export async function ensureBashImage(): Promise<string> {
  await ensurePodman();
  if (await run('podman', ['image', 'exists', BASH_TEST_IMAGE]).then(() => true, () => false)) return BASH_TEST_IMAGE;
  const root = mkdtempSync(join(tmpdir(), 'orch-bash-image-'));
  try {
    for (const dir of ['usr/bin', 'etc', 'tmp', 'proc', 'sys', 'dev', 'root']) mkdirSync(join(root, dir), { recursive: true });
    symlinkSync('usr/bin', join(root, 'bin'));
    copyFileSync('/bin/busybox', join(root, 'usr/bin/busybox'));
    for (const applet of (await run('/bin/busybox', ['--list'])).split('\n').filter((name) => name && name !== 'busybox')) {
      symlinkSync('busybox', join(root, 'usr/bin', applet));
    }
    const bash = realpathSync('/usr/bin/bash');
    copyFileSync(bash, join(root, 'usr/bin/bash'));
    for (const library of (await run('ldd', [bash])).matchAll(/(\/\S+) \(0x/g)) {
      mkdirSync(join(root, dirname(library[1]!)), { recursive: true });
      copyFileSync(library[1]!, join(root, library[1]!));
    }
    writeFileSync(join(root, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
    await run('tar', ['-C', root, '-cf', join(root, 'rootfs.tar'), '--exclude', './rootfs.tar', '.']);
    await run('podman', ['import', '--change', 'CMD ["/bin/sh"]', '--change', 'ENV PATH=/usr/bin:/bin', join(root, 'rootfs.tar'), BASH_TEST_IMAGE]);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
  return BASH_TEST_IMAGE;
}

/**
 * The default image's uv, standing in for `uv venv --python X --seed DIR`: makes DIR with an activate script and
 * a python that says which Python the environment was asked for and what uv was called with.
 */
export const UV_VENV_STAND_IN = [
  'for word in "$@"; do [ "$previous" = --python ] && python=$word; previous=$word; done',
  'mkdir -p "$previous/bin"',
  'printf \'export VIRTUAL_ENV=%s\\nexport PATH=%s/bin:$PATH\\n\' "$previous" "$previous" > "$previous/bin/activate"',
  'printf \'#!/bin/sh\\necho "Python %s (uv %s)"\\n\' "$python" "$*" > "$previous/bin/python"',
  'chmod +x "$previous/bin/python"',
].join('\n');

/**
 * A stand-in, under its name, for an image of a registry the test machines cannot reach (dstack's Docker-in-Docker
 * image, the default image's devel variant): TEST_IMAGE's busybox with `programs` in /bin, scripts that say they ran.
 * removeStandInImage removes it.
 */
export async function ensureStandInImage(image: string, programs: Record<string, string>): Promise<void> {
  await ensurePodman();
  const context = mkdtempSync(join(tmpdir(), 'orch-stand-in-image-'));
  try {
    for (const [name, script] of Object.entries(programs)) writeFileSync(join(context, name), `#!/bin/sh\n${script}\n`, { mode: 0o755 });
    writeFileSync(join(context, 'Containerfile'), [`FROM ${TEST_IMAGE}`, ...Object.keys(programs).map((name) => `COPY ${name} /bin/${name}`), ''].join('\n'));
    await run('podman', ['build', '--quiet', '--pull=never', '-t', image, context]);
  } finally {
    rmSync(context, { recursive: true, force: true });
  }
}

export async function removeStandInImage(image: string): Promise<void> {
  await run('podman', ['rmi', '--force', image]).catch(() => undefined);
}

function run(command: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => (error ? reject(new Error(`${command} failed: ${stderr || error.message}`)) : resolve(stdout)));
  });
}
