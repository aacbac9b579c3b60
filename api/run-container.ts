import { split } from 'shlex';
import type { JobSubmission } from './agent.js';
import { normalizeResources } from './resources.js';
import type { RunSpec } from './spec.js';

/** The shell of runs that name none. */
export const DEFAULT_SHELL = '/bin/sh';

/**
 * The image of a run that gives `python` and no `image`: Docker Hub's official Python image in its slim
 * Debian variant, which has that Python, pip and bash and nothing more (no CUDA toolkit: PyTorch's and
 * JAX's wheels bring the CUDA libraries they need).
 */
export function pythonImage(version: string): string {
  return `python:${version}-slim`;
}

/** The shell the commands run in: `sh` and `bash` are those of /bin, as in dstack; an absolute path is taken as it is. */
export function shellPath(shell: string | undefined): string {
  if (shell === undefined) return DEFAULT_SHELL;
  return shell.startsWith('/') ? shell : `/bin/${shell}`;
}

/** The words of an entrypoint, split as a POSIX shell (and dstack, through Python's shlex) splits them. */
export function entrypointWords(entrypoint: string): string[] {
  return split(entrypoint);
}

type ContainerFields = 'image' | 'shell' | 'entrypoint' | 'privileged' | 'shmSizeMib';

/** How the job of a run is started: its image, the shell or entrypoint its commands go to, and its container's settings. */
export function jobContainer(spec: Pick<RunSpec, 'image' | 'python' | 'shell' | 'entrypoint' | 'privileged' | 'resources'>): Pick<JobSubmission, ContainerFields> {
  const shmSizeMib = normalizeResources(spec.resources, 'run').shmSizeMib;
  return {
    image: spec.image ?? (spec.python === undefined ? undefined : pythonImage(spec.python)),
    shell: shellPath(spec.shell),
    ...(spec.entrypoint === undefined ? {} : { entrypoint: entrypointWords(spec.entrypoint) }),
    ...(spec.privileged ? { privileged: true } : {}),
    ...(shmSizeMib === null ? {} : { shmSizeMib }),
  };
}
