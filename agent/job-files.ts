import { chmod, mkdir, writeFile } from 'node:fs/promises';
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

/** Writes the job's files on this machine (process runtime). */
export async function writeJobFiles(workingDir: string, files: readonly JobFile[]): Promise<void> {
  for (const file of files) {
    const target = isAbsolute(file.path) ? file.path : resolve(workingDir, file.path);
    await mkdir(dirname(target), { recursive: true });
    await writeFile(target, Buffer.from(file.contentBase64, 'base64'));
    await chmod(target, fileMode(file));
  }
}
