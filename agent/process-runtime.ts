import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, realpath } from 'node:fs/promises';
import { join } from 'node:path';
import { DEFAULT_SHELL } from '../api/run-container.js';
import { prepareJobDirectory } from './job-files.js';
import { linkProcessVolumes, placeProcessRepos } from './job-inputs.js';
import { JOB_MARKER_VARIABLE, killMarked, newJobMark, signalMarked, type JobMark } from './marked-processes.js';
import { OutputOrder } from './output-order.js';
import {
  JobStartError, jobCommandLine, jobEnvironment, signalExitCode,
  type JobContext, type JobExecution, type JobExit, type JobRuntime, type RecoveredJob, type StopSignal,
} from './runtime.js';

/** How long output may keep flowing after the job's shell ended, from processes that left its group. */
const PIPE_DRAIN_MS = 2000;

/**
 * The agent's own settings (its token; on the local backend also the server's, such as the database
 * URL) share this prefix. Jobs inherit the rest of the agent's environment, never these.
 */
const PRIVATE_PREFIX = 'ORCHESTRATOR_';

/** Where a process job runs and with what environment: SSH sessions into it start the same way. */
export interface ProcessJobPlace {
  workingDir: string;
  env: NodeJS.ProcessEnv;
}

/**
 * Runs each job in its shell (`sh -c`), or through its entrypoint, on this machine, in its own process
 * group, its processes marked by a variable of their environment, so that a stop reaches every process
 * the job or an SSH session into it started, even one that left the group. For the local backend and
 * for machines without a container engine.
 */
export class ProcessRuntime implements JobRuntime {
  readonly kind = 'process' as const;
  /** Each running job's shell, with the job's mark. */
  private readonly running = new Map<ChildProcess, JobMark>();
  private readonly places = new Map<string, ProcessJobPlace>();

  async start(context: JobContext): Promise<JobExecution> {
    const { submission, dir, log } = context;
    const root = join(dir, 'work');
    await mkdir(root, { recursive: true });
    const realRoot = await realpath(root);
    try {
      await placeProcessRepos(realRoot, submission.repos ?? []);
    } catch (error) {
      throw new JobStartError(`could not put the repos in place: ${(error as Error).message}`);
    }
    let workingDir: string;
    try {
      workingDir = await prepareJobDirectory(root, submission.workingDir, submission.files);
    } catch (error) {
      throw new JobStartError(`could not prepare the working directory: ${(error as Error).message}`);
    }
    try {
      await linkProcessVolumes(realRoot, submission.volumes ?? []);
    } catch (error) {
      throw new JobStartError((error as Error).message);
    }
    if (context.cancelled()) throw new JobStartError('stopped before it started');

    const inherited = Object.entries(process.env).filter(([name]) => !name.startsWith(PRIVATE_PREFIX));
    const marking = newJobMark();
    const env: NodeJS.ProcessEnv = { ...Object.fromEntries(inherited), ...jobEnvironment(submission), [JOB_MARKER_VARIABLE]: marking.marker };
    // A job with nothing to run (an image's own command, which needs a container) ends at once.
    const [program, ...args] = jobCommandLine(submission) ?? [DEFAULT_SHELL, '-c', ''];
    const child = spawn(program!, args, {
      cwd: workingDir, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'],
    });
    // Read from the first moment: a pipe whose output waited for a listener would hand it over out of turn.
    const output = new OutputOrder(log);
    child.stdout!.on('data', output.reader('stdout'));
    child.stderr!.on('data', output.reader('stderr'));
    await new Promise<void>((resolveSpawn, rejectSpawn) => {
      child.once('spawn', resolveSpawn);
      child.once('error', (error) => rejectSpawn(new JobStartError(`could not start ${program}: ${error.message}`)));
    });
    const startedAt = new Date().toISOString();
    const mark: JobMark = { ...marking, firstId: child.pid! };
    this.running.set(child, mark);
    this.places.set(submission.jobId, { workingDir, env });

    // The job ends with its shell, like a container ends with its first process: whatever it left
    // behind is killed, in its group and out of it (found by its marker), which also closes the pipes
    // so 'close' can fire. A process that shed the marker as well may hold the pipes open: they are
    // cut after a while.
    const swept = new Promise<void>((sweepDone) => {
      child.once('exit', () => {
        killGroup(child, 'SIGKILL');
        const cut = setTimeout(() => closePipes(child), PIPE_DRAIN_MS);
        child.once('close', () => clearTimeout(cut));
        void killMarked(mark).finally(sweepDone);
      });
    });
    const exited = new Promise<JobExit>((resolveExit) => {
      child.once('close', (code, signal) => {
        output.flush();
        this.running.delete(child);
        const finishedAt = new Date().toISOString();
        void swept.then(() => resolveExit({ exitCode: code ?? (signal ? signalExitCode(signal) : null), finishedAt }));
      });
    });
    return {
      startedAt,
      exited,
      kill: async (signal: StopSignal) => {
        killGroup(child, signal);
        await signalMarked(mark, signal);
      },
    };
  }

  async recover(): Promise<RecoveredJob[]> {
    return [];
  }

  async remove(jobId: string): Promise<void> {
    this.places.delete(jobId);
  }

  /** Undefined for a job this runtime never started. */
  place(jobId: string): ProcessJobPlace | undefined {
    return this.places.get(jobId);
  }

  async shutdown(): Promise<void> {
    const exits = [...this.running].map(([child, mark]) => Promise.all([
      new Promise((done) => {
        child.once('close', done);
        killGroup(child, 'SIGKILL');
        if (child.exitCode !== null || child.signalCode !== null) closePipes(child);
        else child.once('exit', () => closePipes(child));
      }),
      killMarked(mark),
    ]));
    await Promise.all(exits);
  }
}

function closePipes(child: ChildProcess): void {
  child.stdout?.destroy();
  child.stderr?.destroy();
}

function killGroup(child: ChildProcess, signal: StopSignal): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
  }
}
