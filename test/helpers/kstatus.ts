import { execFile, execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface KstatusReading {
  /** InProgress, Current, Failed, Terminating, NotFound or Unknown. */
  status: string;
  message: string;
}

/**
 * The folder of scripts/kstatus/, built by scripts/install-kubernetes.sh from the published sigs.k8s.io/cli-utils (or
 * found cached); the first call on a fresh machine builds it, so call it from a hook with a long timeout.
 */
export async function kstatusBinary(): Promise<string> {
  const { stdout } = await promisify(execFile)('sh', [join(ROOT, 'scripts', 'install-kubernetes.sh'), 'kstatus'], { encoding: 'utf8' });
  return join(stdout.trim(), 'kstatus');
}

/** What kstatus's status.Compute, which Flux and kpt wait on, says of each object (JSON as the API server returns it). */
export function kstatusOf(binary: string, objects: unknown[]): KstatusReading[] {
  return JSON.parse(execFileSync(binary, { input: JSON.stringify(objects), encoding: 'utf8' }));
}
