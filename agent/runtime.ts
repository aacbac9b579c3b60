import { constants } from 'node:os';
import type { JobSubmission } from '../api/agent.js';
import { DEFAULT_SHELL } from '../api/run-container.js';
import type { JobLog } from './job-log.js';

export type RuntimeKind = 'docker' | 'process';
export type StopSignal = 'SIGTERM' | 'SIGKILL';

/** What a runtime needs to start one job. */
export interface JobContext {
  readonly submission: JobSubmission;
  /** A directory on this machine that belongs to the job and is removed with it. */
  readonly dir: string;
  readonly log: JobLog;
  /** Called when the runtime starts fetching the job's image. */
  pulling(): void;
  /** True once a stop arrived: the runtime should not start anything more. */
  cancelled(): boolean;
}

export interface JobExit {
  exitCode: number | null;
  finishedAt: string;
}

/** A started job. */
export interface JobExecution {
  readonly startedAt: string;
  kill(signal: StopSignal): Promise<void>;
  /** Settles once the job ended and all its output reached the log (not closed by the runtime). */
  readonly exited: Promise<JobExit>;
}

/** A job found running (or finished) when the agent starts, e.g. a container left by a previous agent. */
export interface RecoveredJob {
  jobId: string;
  execution: JobExecution;
}

export interface JobRuntime {
  readonly kind: RuntimeKind;
  /** Throws JobStartError when the job cannot start (bad image, unwritable file...). */
  start(context: JobContext): Promise<JobExecution>;
  /** Jobs of this instance that outlived a previous agent; `openLog` gives each its (fresh) log. */
  recover(openLog: (jobId: string) => JobLog): Promise<RecoveredJob[]>;
  /** Removes what the runtime keeps for a finished job (its container). */
  remove(jobId: string): Promise<void>;
  /** Stops following jobs; the process runtime also kills them, containers keep running. */
  shutdown(): Promise<void>;
}

export class JobStartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'JobStartError';
  }
}

/**
 * The environment every job sees on top of its image or the agent's own environment. `gpus` is per instance;
 * ORCHESTRATOR_GPUS_NUM is the run's total over its nodes.
 */
export function jobEnvironment(submission: JobSubmission): Record<string, string> {
  const nodes = submission.nodes;
  return {
    ...submission.env,
    ORCHESTRATOR_GPUS_NUM: String(submission.gpus * (nodes?.ips.length ?? 1)),
    ORCHESTRATOR_RUN_NAME: submission.runName,
    ...(submission.gpuIndices && { CUDA_VISIBLE_DEVICES: submission.gpuIndices.join(',') }),
    ...(nodes && {
      ORCHESTRATOR_NODE_RANK: String(nodes.rank),
      ORCHESTRATOR_NODES_NUM: String(nodes.ips.length),
      ORCHESTRATOR_MASTER_NODE_IP: nodes.ips[0]!,
      ORCHESTRATOR_NODES_IPS: nodes.ips.join('\n'),
      ORCHESTRATOR_GPUS_PER_NODE: String(submission.gpus),
    }),
  };
}

/**
 * What a job runs: its entrypoint followed by its commands, each one argument, as dstack passes them; else its
 * commands joined so that the first failure ends them, in its shell. Null when it has neither: a container then
 * runs its image's own entrypoint and command.
 */
export function jobCommandLine(submission: JobSubmission): string[] | null {
  if (submission.entrypoint) return [...submission.entrypoint, ...submission.commands];
  if (submission.commands.length === 0) return null;
  return [submission.shell ?? DEFAULT_SHELL, '-c', submission.commands.join(' && ')];
}

/** Exit status of a process killed by a signal, as shells and container engines report it. */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + constants.signals[signal];
}
