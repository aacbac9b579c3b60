import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

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
