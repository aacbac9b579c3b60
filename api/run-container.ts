import { split } from 'shlex';
import type { JobSubmission } from './agent.js';
import { normalizeResources } from './resources.js';
import type { RunSpec } from './spec.js';

/** The shell of runs that name none. */
export const DEFAULT_SHELL = '/bin/sh';

/**
 * The Python of a run in the default image that gives none: the Ubuntu Python of that image
 * (docker/base/Dockerfile), which dstack's images have too.
 */
export const DEFAULT_PYTHON = '3.12';

/** The shell the commands run in: `sh` and `bash` are those of /bin, as in dstack; an absolute path is taken as it is. */
export function shellPath(shell: string | undefined): string {
  if (shell === undefined) return DEFAULT_SHELL;
  return shell.startsWith('/') ? shell : `/bin/${shell}`;
}

/** The words of an entrypoint, split as a POSIX shell (and dstack, through Python's shlex) splits them. */
export function entrypointWords(entrypoint: string): string[] {
  return split(entrypoint);
}

/**
 * The image of a run with `nvcc: true`: the default image's devel variant (docker/base/Dockerfile with
 * CUDA_VARIANT=devel), which has the CUDA compiler beside uv and its Pythons.
 */
export const NVCC_IMAGE = 'orchestrator/base:cuda-12.8-devel';

/**
 * The image of a run with `docker: true`: dstack's own Docker-in-Docker image (Docker, Compose and the NVIDIA
 * container toolkit), which the run starts its Docker daemon in with `start-dockerd`, in a privileged container.
 */
export const DIND_IMAGE = 'dstackai/dind';

type ContainerFields = 'image' | 'shell' | 'entrypoint' | 'privileged' | 'shmSizeMib' | 'commands' | 'venvPython';

/**
 * How the job of a run is started: its image, the shell or entrypoint `commands` go to, and its container's
 * settings. With `docker: true`, in DIND_IMAGE, privileged, its Docker daemon started first, as dstack does it.
 * In an image of ours (no `image`: the default image, or NVCC_IMAGE), the commands run in a virtual environment
 * of the run's `python`, as dstack runs them in its own image; an image of the run's own, or an entrypoint, gets
 * none (dstack makes none there either).
 */
export function jobContainer(spec: Pick<RunSpec, 'image' | 'python' | 'shell' | 'entrypoint' | 'privileged' | 'docker' | 'nvcc' | 'resources'>, commands: string[]): Pick<JobSubmission, ContainerFields> {
  const shmSizeMib = normalizeResources(spec.resources, 'run').shmSizeMib;
  const docker = spec.docker === true;
  return {
    image: docker ? DIND_IMAGE : spec.nvcc === true ? NVCC_IMAGE : spec.image,
    ...(docker || spec.image !== undefined || spec.entrypoint !== undefined ? {} : { venvPython: spec.python ?? DEFAULT_PYTHON }),
    shell: shellPath(spec.shell),
    ...(spec.entrypoint === undefined ? {} : { entrypoint: entrypointWords(spec.entrypoint) }),
    ...(spec.privileged || docker ? { privileged: true } : {}),
    ...(shmSizeMib === null ? {} : { shmSizeMib }),
    // As in dstack, an entrypoint takes the commands as they are.
    commands: docker && spec.entrypoint === undefined ? ['start-dockerd', ...commands] : commands,
  };
}
