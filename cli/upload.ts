import { readdirSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { isAbsolute, join, posix, relative, resolve, sep } from 'node:path';
import type { JobSubmission } from '../api/agent.js';
import { parseFileMapping } from '../api/mappings.js';
import { CliError } from './errors.js';

export type UploadFile = JobSubmission['files'][number];

/** The server takes request bodies up to 8 MiB; base64 makes files a third larger. One apply is one request. */
export const MAX_UPLOAD_BYTES = 5 * 1024 * 1024;

/** The bytes an apply may still carry, shared by all of its runs. */
export interface UploadBudget {
  leftBytes: number;
}

export function uploadBudget(): UploadBudget {
  return { leftBytes: MAX_UPLOAD_BYTES };
}

/** `~` and `~/…` under the user's home ($HOME first, as the shell does). */
export function expandHome(path: string): string {
  if (path === '~') return process.env.HOME || homedir();
  if (path.startsWith('~/')) return join(process.env.HOME || homedir(), path.slice(2));
  return path;
}

/** Where an entry lands in the container: its own relative path unless a remote path is given. */
function remotePath(entry: string, localText: string, remote: string | null): string {
  if (remote !== null) {
    if (remote.startsWith('~')) throw new CliError(`files: "${entry}": write the container path as an absolute path or relative to the working directory, not with ~`);
    return posix.normalize(remote);
  }
  const normalized = posix.normalize(localText.split(sep).join('/'));
  if (isAbsolute(localText) || localText.startsWith('~') || normalized === '..' || normalized.startsWith('../')) {
    throw new CliError(`files: "${entry}" is not inside the configuration's folder; say where it goes in the container, e.g. "${entry}:/workflow/${posix.basename(normalized)}"`);
  }
  return normalized;
}

function walk(localPath: string, remote: string, into: UploadFile[]): number {
  const stats = statSync(localPath);
  if (stats.isDirectory()) {
    let bytes = 0;
    for (const name of readdirSync(localPath).sort()) bytes += walk(join(localPath, name), posix.join(remote, name), into);
    return bytes;
  }
  if (!stats.isFile()) return 0;
  const content = readFileSync(localPath);
  into.push({ path: remote, contentBase64: content.toString('base64'), mode: stats.mode & 0o777 });
  return content.length;
}

/**
 * Reads a run's `files` entries (`path` or `local:remote`, local paths relative to the configuration's
 * folder, folders taken whole) into the list the server expects, within what is left of `budget`.
 */
export function collectFiles(entries: readonly string[], baseDir: string, budget: UploadBudget = uploadBudget()): UploadFile[] {
  const files: UploadFile[] = [];
  for (const entry of entries) {
    let mapping;
    try {
      mapping = parseFileMapping(entry);
    } catch (error) {
      throw new CliError(`files: ${(error as Error).message}`);
    }
    const remote = remotePath(entry, mapping.localPath, mapping.path);
    const localPath = resolve(baseDir, expandHome(mapping.localPath));
    try {
      budget.leftBytes -= walk(localPath, remote, files);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      const where = relative(process.cwd(), localPath) || '.';
      throw new CliError(code === 'ENOENT' ? `files: "${entry}": ${where} does not exist` : `files: "${entry}": cannot read ${where}: ${(error as Error).message}`);
    }
    if (budget.leftBytes < 0) {
      throw new CliError(`files: the files add up to more than ${MAX_UPLOAD_BYTES / 1024 / 1024} MiB, the most one apply can carry; let the commands download large data instead`);
    }
  }
  return files;
}
