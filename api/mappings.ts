/** The `a:b` forms of ports, files and volumes, shared by validation, the CLI and the server. */
import { leavesFolder, resolveInside } from './container-paths.js';

export interface PortMapping {
  /** Null for `*`: any free local port. */
  local: number | null;
  container: number;
}

function port(text: string, whole: string): number {
  const value = /^\d+$/.test(text.trim()) ? Number(text) : NaN;
  if (!(value >= 1 && value <= 65535)) {
    throw new Error(`invalid port mapping "${whole}": "${text}" is not a port from 1 to 65535; expected "local:container" such as "8080:80" or "*:80"`);
  }
  return value;
}

/** `8080` forwards the same port; `"8080:80"` forwards local 8080 to container port 80; `"*:80"` any free local port to 80. */
export function parsePortMapping(input: number | string): PortMapping {
  if (typeof input === 'number') {
    if (!Number.isInteger(input) || input < 1 || input > 65535) throw new Error(`invalid port ${input}; expected a port from 1 to 65535`);
    return { local: input, container: input };
  }
  const parts = input.split(':');
  if (parts.length === 1) {
    const single = port(parts[0], input);
    return { local: single, container: single };
  }
  if (parts.length !== 2) throw new Error(`invalid port mapping "${input}"; expected "local:container" such as "8080:80" or "*:80"`);
  return { local: parts[0]!.trim() === '*' ? null : port(parts[0]!, input), container: port(parts[1]!, input) };
}

export interface FileMapping {
  localPath: string;
  /** Where it lands in the container; null keeps the local relative path under the working directory. */
  path: string | null;
}

/**
 * Why a file's place in the run can never be valid, or null. A relative path is under the working
 * directory and must stay there; an absolute one is inside the container (the process runtime,
 * which has none, refuses it when the job starts).
 */
export function remotePathProblem(path: string): string | null {
  if (!leavesFolder(path)) return null;
  return `${JSON.stringify(path)} leaves the working directory; give a path inside it, or an absolute path in the container`;
}

/** `data` or `data:/workflow/data`. */
export function parseFileMapping(text: string): FileMapping {
  const separator = text.indexOf(':');
  if (separator < 0) {
    if (text.trim() === '') throw new Error('invalid file entry: the path is empty');
    return { localPath: text, path: null };
  }
  const localPath = text.slice(0, separator);
  const path = text.slice(separator + 1);
  if (localPath.trim() === '' || path.trim() === '') {
    throw new Error(`invalid file mapping "${text}"; expected "local:remote" with both paths given, such as "data:/workflow/data"`);
  }
  const problem = remotePathProblem(path);
  if (problem) throw new Error(`invalid file mapping "${text}": ${problem}`);
  return { localPath, path };
}

export interface VolumeMount {
  instancePath: string;
  path: string;
  optional: boolean;
}

function absolute(path: string, role: string, whole: string): string {
  if (!path.startsWith('/')) throw new Error(`invalid volume "${whole}": the ${role} "${path}" must be an absolute path`);
  return path;
}

/** `"/mnt/cache:/root/.cache"` or `{instance_path, path, optional}`. */
export function parseVolumeMount(input: string | { instance_path: string; path: string; optional?: boolean }): VolumeMount {
  if (typeof input !== 'string') {
    const whole = `${input.instance_path}:${input.path}`;
    return { instancePath: absolute(input.instance_path, 'instance path', whole), path: absolute(input.path, 'container path', whole), optional: input.optional ?? false };
  }
  const parts = input.split(':');
  if (parts.length !== 2) throw new Error(`invalid volume "${input}"; expected "instance_path:path" such as "/mnt/cache:/root/.cache"`);
  if (!parts[0].startsWith('/') && /^[a-z0-9][-a-z0-9_.]*$/i.test(parts[0])) {
    throw new Error(`invalid volume "${input}": "${parts[0]}" names a network volume, which is not supported; mount a directory of the instance instead, such as "/mnt/${parts[0]}:${parts[1]}"`);
  }
  return { instancePath: absolute(parts[0], 'instance path', input), path: absolute(parts[1], 'container path', input), optional: false };
}

/** Where a repo lands in the container when its entry does not say: the default working directory. */
export const DEFAULT_REPO_PATH = '/workflow';

/** One entry of a run's `repos`: a folder on the applier's machine, or a git URL the instance clones. */
export interface RepoEntry {
  localPath: string | null;
  url: string | null;
  branch?: string;
  hash?: string;
  /** Absolute, inside the container. */
  path: string;
  ifExists?: 'error' | 'skip';
}

type RepoInput = string | { url?: string; local_path?: string; branch?: string; hash?: string; path?: string; if_exists?: 'error' | 'skip' };

/** `https://…`, `ssh://…`, `git://…`, `file://…` or scp-like `git@host:org/repo.git`. */
export function isGitUrl(text: string): boolean {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(text) || /^[^/\s:@]+@[^/\s:]+:/.test(text);
}

/**
 * A `repos` entry in one form: `.`, `../other`, `../other:/workflow/other`, a git URL, or a map with
 * `local_path` or `url`, `branch`, `hash` and `path` (relative paths are under /workflow).
 */
export function parseRepoEntry(input: RepoInput): RepoEntry {
  const entry: Omit<RepoEntry, 'path'> & { path?: string } = typeof input === 'string' ? repoFromText(input) : { localPath: input.local_path ?? null, url: input.url ?? null, branch: input.branch, hash: input.hash, path: input.path, ifExists: input.if_exists };
  if ((entry.localPath === null) === (entry.url === null)) throw new Error('give exactly one of url and local_path');
  if (entry.hash !== undefined && !/^[0-9a-f]{4,64}$/i.test(entry.hash)) throw new Error(`invalid repo hash "${entry.hash}"; expected a commit hash such as 3f2a9c1`);
  if (entry.localPath !== null && (entry.branch !== undefined || entry.hash !== undefined)) {
    throw new Error(`branch and hash go with url; the local repo ${entry.localPath} is taken at its checked-out commit with your uncommitted changes`);
  }
  const path = resolveInside(DEFAULT_REPO_PATH, entry.path ?? DEFAULT_REPO_PATH);
  return { ...entry, hash: entry.hash?.toLowerCase(), path };
}

function repoFromText(text: string): Omit<RepoEntry, 'path'> & { path?: string } {
  if (isGitUrl(text)) return { localPath: null, url: text, path: undefined };
  const separator = text.lastIndexOf(':');
  if (separator < 0) return { localPath: text, url: null };
  const path = text.slice(separator + 1);
  if (text.slice(0, separator) === '' || path === '') throw new Error(`invalid repo "${text}"; expected a folder, "folder:path" such as "..:/workflow/parent", or a git URL`);
  return { localPath: text.slice(0, separator), url: null, path };
}
