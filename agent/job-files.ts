import { chmod, mkdir, stat, writeFile } from 'node:fs/promises';
import { dirname, isAbsolute, posix, resolve } from 'node:path';
import type { JobSubmission } from '../api/agent.js';

export type JobFile = JobSubmission['files'][number];

const DEFAULT_FILE_MODE = 0o644;

export function fileMode(file: JobFile): number {
  return file.mode ?? DEFAULT_FILE_MODE;
}

/** Where a file lands: relative paths under the working directory, absolute paths as given. */
export function containerFilePath(workingDir: string, file: JobFile): string {
  return posix.isAbsolute(file.path) ? posix.normalize(file.path) : posix.join(workingDir, file.path);
}

/**
 * Creates a directory and its missing parents. Unlike mkdir's `recursive` option, it fails instead of
 * looping forever where mkdir answers ENOENT under an existing parent (e.g. anywhere in /proc).
 */
export async function makeDirectories(dir: string): Promise<void> {
  const missing: string[] = [];
  for (let current = resolve(dir); ; current = dirname(current)) {
    try {
      if ((await stat(current)).isDirectory()) break;
      throw new Error(`${current} exists and is not a directory`);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      missing.push(current);
      if (dirname(current) === current) break;
    }
  }
  for (const directory of missing.reverse()) {
    await mkdir(directory).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
  }
}

/** Writes the job's files on this machine (process runtime). */
export async function writeJobFiles(workingDir: string, files: readonly JobFile[]): Promise<void> {
  for (const file of files) {
    const target = isAbsolute(file.path) ? file.path : resolve(workingDir, file.path);
    await makeDirectories(dirname(target));
    await writeFile(target, Buffer.from(file.contentBase64, 'base64'));
    await chmod(target, fileMode(file));
  }
}
