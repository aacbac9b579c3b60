/** The `a:b` forms of ports, files and volumes, shared by validation, the CLI and the server. */
import { posix } from 'node:path';

export interface PortMapping {
  local: number;
  container: number;
}

function port(text: string, whole: string): number {
  const value = /^\d+$/.test(text.trim()) ? Number(text) : NaN;
  if (!(value >= 1 && value <= 65535)) {
    throw new Error(`invalid port mapping "${whole}": "${text}" is not a port from 1 to 65535; expected "local:container" such as "8080:80"`);
  }
  return value;
}

/** `8080` forwards the same port; `"8080:80"` forwards local 8080 to container port 80. */
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
  if (parts.length !== 2) throw new Error(`invalid port mapping "${input}"; expected "local:container" such as "8080:80"`);
  return { local: port(parts[0], input), container: port(parts[1], input) };
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
  if (posix.isAbsolute(path)) return null;
  const normalized = posix.normalize(path);
  if (normalized !== '..' && !normalized.startsWith('../')) return null;
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
  return { instancePath: absolute(parts[0], 'instance path', input), path: absolute(parts[1], 'container path', input), optional: false };
}
