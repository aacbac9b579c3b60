import { setTimeout as sleep } from 'node:timers/promises';
import type { LogLine, Run } from '../api/objects.js';
import type { RunStatus } from '../api/status.js';
import { FINISHED_RUN_STATUSES } from '../api/status.js';
import { ConnectionLostError, ServerUnreachableError, type ApiClient } from './client.js';
import { projectFlag } from './connect.js';
import { CliError } from './errors.js';
import type { StatusDisplay } from './progress.js';

const RECONNECT_DELAY_MS = 1000;
const MAX_BROKEN_STREAMS = 3;

export type FollowOutcome = { kind: 'finished'; run: Run } | { kind: 'interrupted' };

export function isFinished(run: Pick<Run, 'status'>): boolean {
  return FINISHED_RUN_STATUSES.includes(run.status);
}

export function runPath(client: ApiClient, name: string, rest = ''): string {
  return client.projectPath(`/runs/${encodeURIComponent(name)}${rest}`);
}

/** Statuses a run reaches only once its job started. */
const STARTED_RUN_STATUSES: readonly RunStatus[] = ['running', 'terminating'];

/** A line as printed: a multi-node task's lines start with the rank of the node that printed them. */
export function logLineText(line: LogLine): string {
  return line.node === undefined ? line.text : `[rank ${line.node}] ${line.text}`;
}

export function writeLogLine(line: LogLine): void {
  (line.stream === 'stderr' ? process.stderr : process.stdout).write(`${logLineText(line)}\n`);
}

/**
 * The last line printed of each job: of the run's own (key -1), or of each node of a multi-node task; `query`
 * is the `after` the logs route takes to go on from there.
 */
export class LogCursors {
  private readonly seqs = new Map<number, number>();

  /** How many lines are missing before `line`. */
  gapBefore(line: LogLine): number {
    return line.seq - (this.seqs.get(line.node ?? -1) ?? 0) - 1;
  }

  advance(line: LogLine): void {
    this.seqs.set(line.node ?? -1, line.seq);
  }

  /** One number for a run's own job; a list (with at least two entries, so that it reads as one) for nodes. */
  query(): string {
    const ranks = [...this.seqs.keys()].filter((key) => key >= 0);
    if (ranks.length === 0) return String(this.seqs.get(-1) ?? 0);
    return Array.from({ length: Math.max(...ranks, 1) + 1 }, (_, rank) => this.seqs.get(rank) ?? 0).join(',');
  }
}

/** Said on stderr where lines are missing: the server keeps a limited amount of each run's logs. */
export function droppedLinesNote(count: number): string {
  return `(${count} ${count === 1 ? 'line was' : 'lines were'} dropped here: the server keeps a limited amount of each run's logs)`;
}

/**
 * Streams a run's logs (stdout lines to stdout, stderr lines to stderr) and, when `display` is given,
 * its status changes, until the run finishes or the user presses Ctrl-C. A stream the server ends
 * early is picked up again after the last line printed, so no line shows twice. The stream reports
 * the status it sees at each look, so a short job may pass `running` unseen: its first line, or its
 * start time at the end, says it ran, and `running` is shown there, before its output.
 */
/**
 * `pick` chooses which replica of a service is followed (the lowest-numbered live one when left out), or which node of
 * a multi-node task (every node, each line after its rank, when left out).
 */
export async function followRun(client: ApiClient, name: string, display: StatusDisplay | null, pick: JobPick = {}): Promise<FollowOutcome> {
  const controller = new AbortController();
  const interrupt = () => controller.abort();
  process.on('SIGINT', interrupt);
  let after = new LogCursors();
  let broken = 0;
  let started = false;
  /** The attempt whose lines are printed, once the stream has named it, and how it ended. */
  let attempt = pick.attempt;
  let attemptEnd: { status: RunStatus; statusMessage: string } | null = null;
  const showStarted = () => {
    if (!started) display?.update('running', '');
    started = true;
  };
  try {
    for (;;) {
      try {
        for await (const item of client.stream(runPath(client, name, `/logs?follow=true&after=${after.query()}${jobPickQuery({ ...pick, attempt })}`), controller.signal)) {
          if (item.type === 'status') {
            attempt = item.attempt;
            if (isFinished(item)) attemptEnd = item;
            // The end is shown from the run itself once the stream closes, after every line.
            else display?.update(item.status, item.statusMessage);
            if (STARTED_RUN_STATUSES.includes(item.status)) started = true;
          } else {
            showStarted();
            const line = item.line;
            const write = () => {
              const gap = after.gapBefore(line);
              if (gap > 0) process.stderr.write(`${droppedLinesNote(gap)}\n`);
              writeLogLine(line);
            };
            if (display) display.around(write);
            else write();
            after.advance(line);
          }
        }
        if (controller.signal.aborted) return { kind: 'interrupted' };
        const run = await client.get<Run>(runPath(client, name));
        if (pick.attempt === undefined && attempt !== undefined && run.attempt > attempt) {
          const note = `attempt ${attempt} ${attemptEnd ? `${attemptEnd.status}: ${attemptEnd.statusMessage}` : 'ended'}; following attempt ${run.attempt}, submitted under the run's retry`;
          if (display) display.around(() => process.stderr.write(`${note}\n`));
          else process.stderr.write(`${note}\n`);
          attempt = run.attempt;
          attemptEnd = null;
          after = new LogCursors();
          started = false;
          continue;
        }
        if (isFinished(run)) {
          if (run.startedAt !== null) showStarted();
          display?.update(run.status, run.statusMessage);
          return { kind: 'finished', run };
        }
      } catch (error) {
        if (controller.signal.aborted) return { kind: 'interrupted' };
        if (!isConnectionProblem(error)) throw error;
        if (++broken > MAX_BROKEN_STREAMS) throw new CliError(`${error.message}; follow again with: orchestrator logs -f ${name}${projectFlag()}`);
      }
      await sleep(RECONNECT_DELAY_MS, undefined, { signal: controller.signal }).catch(() => undefined);
      if (controller.signal.aborted) return { kind: 'interrupted' };
    }
  } finally {
    process.off('SIGINT', interrupt);
    display?.stop();
  }
}

/** Which job's lines to read: a replica of a service, a node of a multi-node task, an attempt of a run under `retry`. */
export interface JobPick {
  replica?: number;
  node?: number;
  attempt?: number;
}

export function jobPickQuery(pick: JobPick): string {
  return (['replica', 'node', 'attempt'] as const).map((key) => (pick[key] === undefined ? '' : `&${key}=${pick[key]}`)).join('');
}

function isConnectionProblem(error: unknown): error is CliError {
  return error instanceof ConnectionLostError || error instanceof ServerUnreachableError;
}

/** The exit code that stands for how a run ended: 0 when done, the task's own code when it failed with one, else 1. */
export function exitCodeOf(run: Run): number {
  if (run.status === 'done') return 0;
  if (run.status === 'failed' && run.exitCode !== null && run.exitCode > 0) return Math.min(run.exitCode, 255);
  return 1;
}
