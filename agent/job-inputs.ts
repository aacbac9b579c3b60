import { lstat, readdir, realpath, stat, symlink } from 'node:fs/promises';
import { basename, dirname, join, posix } from 'node:path';
import type { JobRepo, JobVolume } from '../api/agent.js';
import { confinedDirectory } from './job-files.js';
import { checkoutRepo, reposToPlace } from './repos.js';

/** The container folder that a process job's own folder stands in for (the docker runtime's default working directory). */
export const PROCESS_WORKFLOW = '/workflow';

/**
 * Where a container path is in a process job's folder: `/workflow` is the folder itself, and a path under
 * it the same path under the folder. Anything else has no place without a container: an Error says so.
 */
function placeUnderWorkflow(path: string, what: string): string {
  const normalized = posix.resolve(PROCESS_WORKFLOW, path);
  if (normalized === PROCESS_WORKFLOW) return '.';
  if (normalized.startsWith(`${PROCESS_WORKFLOW}/`)) return normalized.slice(PROCESS_WORKFLOW.length + 1);
  throw new Error(`${what} ${path} is outside ${PROCESS_WORKFLOW}; the process runtime has no container, so it can only place it in the job's folder, which stands for ${PROCESS_WORKFLOW} (a backend with runtime: docker mounts anywhere)`);
}

/**
 * Clones or writes each repo into the job's folder `root` (a real path), outer paths first so that inner ones land
 * inside them; a repo whose place an outer one filled follows its `ifExists`.
 */
export async function placeProcessRepos(root: string, repos: readonly JobRepo[]): Promise<void> {
  for (const repo of [...repos].sort((a, b) => a.path.length - b.path.length)) {
    const inside = placeUnderWorkflow(repo.path, 'the repo path');
    const target = await confinedDirectory(root, inside, repo.path);
    for (const placed of await reposToPlace([repo], async () => (await readdir(target)).length > 0)) await checkoutRepo(placed, target);
  }
}

/**
 * Links each volume's instance directory at its place in the job's folder `root` (a real path). A missing
 * instance path fails the job unless the volume is optional; a place already taken by a repo or a file does too.
 */
export async function linkProcessVolumes(root: string, volumes: readonly JobVolume[]): Promise<void> {
  for (const volume of volumes) {
    if (!(await isDirectory(volume.instancePath))) {
      if (volume.optional) continue;
      throw new Error(missingVolumeMessage(volume));
    }
    const inside = placeUnderWorkflow(volume.path, 'the volume path');
    if (inside === '.') throw new Error(`the volume path ${volume.path} is the job's whole folder; mount it at a folder under ${PROCESS_WORKFLOW}`);
    const parent = await confinedDirectory(root, dirname(inside), volume.path);
    const link = join(parent, basename(inside));
    if (await lstat(link).then(() => true, () => false)) throw new Error(`the volume path ${volume.path} is already taken by a repo or a file of the job`);
    await symlink(await realpath(volume.instancePath), link);
  }
}

export async function isDirectory(path: string): Promise<boolean> {
  return stat(path).then((stats) => stats.isDirectory(), () => false);
}

export function missingVolumeMessage(volume: JobVolume): string {
  return `the volume ${volume.instancePath}:${volume.path} cannot be mounted: ${volume.instancePath} is not a directory on this instance; create it there, or mark the volume optional: true to run without it`;
}
