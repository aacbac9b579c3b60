import { constants } from 'node:fs';
import { lstat, mkdir, open, realpath, unlink } from 'node:fs/promises';
import { basename, dirname, isAbsolute, join, posix, relative, resolve, sep } from 'node:path';
import type { JobFile } from '../api/agent.js';

const DEFAULT_FILE_MODE = 0o644;
/** Permission bits only: a job's files are never setuid, setgid or sticky. */
const PERMISSION_BITS = 0o777;

export function fileMode(file: JobFile): number {
  return (file.mode ?? DEFAULT_FILE_MODE) & PERMISSION_BITS;
}

/** Where a file lands in a container: relative paths under the working directory, absolute paths as given, both inside the container. */
export function containerFilePath(workingDir: string, file: JobFile): string {
  return posix.isAbsolute(file.path) ? posix.normalize(file.path) : posix.join(workingDir, file.path);
}

/**
 * The place of `path` under `root`, relative to it. Without a container there is nothing for an
 * absolute path to be inside of, so it is refused, as is a `..` that leaves `root`.
 */
function confined(root: string, base: string, path: string, what: string): string {
  if (isAbsolute(path)) {
    throw new Error(`${what} ${JSON.stringify(path)} is an absolute path; the process runtime has no container, so give a path relative to the working directory`);
  }
  const inside = relative(root, resolve(root, base, path));
  if (inside === '..' || inside.startsWith(`..${sep}`) || isAbsolute(inside)) {
    throw new Error(`${what} ${JSON.stringify(path)} leaves the job's directory`);
  }
  return inside;
}

/**
 * Creates `inside` (relative) under `root` (a real path) one directory at a time, refusing to pass
 * through a symbolic link, and returns its absolute path once its real path is checked to be it.
 */
export async function confinedDirectory(root: string, inside: string, shown: string): Promise<string> {
  let current = root;
  for (const name of inside.split(sep).filter((part) => part !== '' && part !== '.')) {
    current = join(current, name);
    const stats = await lstat(current).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'ENOENT') throw error;
      return null;
    });
    if (stats?.isSymbolicLink()) throw new Error(`${JSON.stringify(shown)} goes through the symbolic link ${relative(root, current)}`);
    if (stats && !stats.isDirectory()) throw new Error(`${JSON.stringify(shown)} goes through ${relative(root, current)}, which is not a directory`);
    if (!stats) await mkdir(current);
  }
  if ((await realpath(current)) !== current) throw new Error(`${JSON.stringify(shown)} leaves the job's directory`);
  return current;
}

/** Creates or replaces one file as a new inode: never through a symbolic link or into another file's hard link. */
async function writeNewFile(target: string, shown: string, content: Buffer, mode: number): Promise<void> {
  await unlink(target).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'EISDIR') throw new Error(`the file ${JSON.stringify(shown)} names a directory`);
    if (error.code !== 'ENOENT') throw error;
  });
  const handle = await open(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  try {
    await handle.writeFile(content);
    await handle.chmod(mode);
  } finally {
    await handle.close();
  }
}

/**
 * Prepares a job's working directory and files on this machine (process runtime), all confined to
 * `root`: `workingDir` and the files' paths are relative, and never lead outside it, by `..` or by a
 * symbolic link. Throws an Error naming the offending path. Returns the working directory.
 */
export async function prepareJobDirectory(root: string, workingDir: string | undefined, files: readonly JobFile[]): Promise<string> {
  await mkdir(root, { recursive: true });
  const realRoot = await realpath(root);
  const workingInside = confined(realRoot, '.', workingDir ?? '.', 'the working directory');
  const working = await confinedDirectory(realRoot, workingInside, workingDir ?? '.');
  for (const file of files) {
    const inside = confined(realRoot, workingInside, file.path, 'the file');
    const parent = await confinedDirectory(realRoot, dirname(inside), file.path);
    await writeNewFile(join(parent, basename(inside)), file.path, Buffer.from(file.contentBase64, 'base64'), fileMode(file));
  }
  return working;
}
