import type { JobState, JobStatus, JobSubmission, LogEntry } from '../../api/agent.js';
import { DEFAULT_GRACE_SECONDS, MAX_LOG_PAGE_BYTES } from '../../agent/jobs.js';
import { Waiters } from '../../agent/waiters.js';
import type { StoredLogsPage } from '../../agent/logs-page.js';
import type { StopRequest } from '../../agent/requests.js';
import { jobEnvironment, signalExitCode } from '../../agent/runtime.js';
import { expandWord, parseScript, ScriptError, type Sequence } from './simulated-script.js';

/** How long a simulated job takes where a real one takes time; configurable per emulator. */
export interface SimulatedTimings {
  /** From submission to running (an image job spends it `pulling`). */
  startMs: number;
  /** From SIGTERM to exit: the job's own shutdown; the grace period caps it. */
  stopMs: number;
}


const FINAL_STATES: readonly JobState[] = ['exited', 'failed', 'stopped'];

class Stopped extends Error {}

/**
 * One job of a simulated agent: the agent's state machine (pending, pulling, running, exited/failed/stopped), its
 * log as numbered entries (the oldest dropped past `maxLogLines`, as the agent's rotation does), and its stop
 * (SIGTERM, then SIGKILL after the grace period), played by timers instead of a process.
 */
export class SimulatedJob {
  status: JobStatus;
  /** When the server last asked for this job's status: the simulated agent's view of being watched. */
  lastAskedAt: number | null = null;
  private readonly entries: string[] = [];
  private firstSeq = 1;
  private lastSeq = 0;
  private ended = false;
  private readonly waiters = new Waiters();
  private readonly timers = new Set<NodeJS.Timeout>();
  private wakeSleep: (() => void) | null = null;
  private stopSignal: 'SIGTERM' | 'SIGKILL' | null = null;

  /** `stateChanged` is called after each change of the job's state, as the agent wakes its `POST /api/jobs/changes` callers. */
  constructor(readonly submission: JobSubmission, private readonly timings: SimulatedTimings, private readonly maxLogLines: number,
    private readonly stateChanged: () => void = () => {}) {
    this.status = { jobId: submission.jobId, state: 'pending', exitCode: null, startedAt: null, finishedAt: null };
    void this.run();
  }

  get finished(): boolean {
    return FINAL_STATES.includes(this.status.state);
  }

  /** SIGTERM, and SIGKILL after the grace period; `abort` kills at once. A job that has not started stops at once. */
  stop(request: StopRequest): void {
    if (this.finished) return;
    if (this.status.state === 'pending' || this.status.state === 'pulling') {
      this.stopSignal = 'SIGKILL';
      this.end('stopped', null);
      return;
    }
    if (request.abort) return this.signal('SIGKILL');
    if (this.stopSignal) return;
    this.stopSignal = 'SIGTERM';
    const graceMs = (request.graceSeconds ?? DEFAULT_GRACE_SECONDS) * 1000;
    this.after(Math.min(graceMs, this.timings.stopMs), () => this.signal(graceMs < this.timings.stopMs ? 'SIGKILL' : 'SIGTERM'));
  }

  /** The machine went away: timers end, and nothing more is written. */
  dispose(): void {
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.ended = true;
    this.stopSignal ??= 'SIGKILL';
    this.wakeSleep?.();
    this.waiters.wakeAll();
  }

  async logs(after: number, waitMs: number): Promise<StoredLogsPage> {
    if (this.lastSeq <= after && !this.ended && waitMs > 0) await this.waiters.wait(waitMs);
    return this.page(after, MAX_LOG_PAGE_BYTES);
  }

  /** Entries after `after` without waiting: the first one, then others while they fit `maxBytes`; none at 0. */
  page(after: number, maxBytes: number): StoredLogsPage {
    const first = Math.max(after + 1, this.firstSeq);
    const lines: string[] = [];
    for (let seq = first, bytes = 0; seq <= this.lastSeq && maxBytes > 0; seq++) {
      const line = this.entries[seq - this.firstSeq]!;
      bytes += line.length + 1;
      if (lines.length > 0 && bytes > maxBytes) break;
      lines.push(line);
    }
    const next = lines.length > 0 ? first + lines.length - 1 : Math.max(after, Math.min(this.lastSeq, this.firstSeq - 1));
    return { jsonLines: lines.join('\n'), firstSeq: first, next, finished: this.ended && next >= this.lastSeq, more: next < this.lastSeq };
  }

  private async run(): Promise<void> {
    let script: Sequence | string;
    try {
      script = parseScript(this.submission.entrypoint ? 'serve' : this.submission.commands.join(' && '));
    } catch (error) {
      script = (error as ScriptError).message;
    }
    if (this.submission.image !== undefined) {
      this.status.state = 'pulling';
      this.stateChanged();
    }
    await this.sleep(this.timings.startMs).catch(() => undefined);
    if (this.finished || this.ended) return;
    this.status = { ...this.status, state: 'running', startedAt: new Date().toISOString() };
    this.stateChanged();
    if (typeof script === 'string') {
      this.print('stderr', `sh: syntax error: ${script}`);
      this.end('exited', 2);
      return;
    }
    try {
      const code = await this.sequence(script, { ...process.env as Record<string, string>, ...jobEnvironment(this.submission) });
      this.end('exited', code);
    } catch (error) {
      if (!(error instanceof Stopped)) throw error;
    }
  }

  /** Runs steps as a shell does; resolves with the last status, or rejects with Stopped. */
  private async sequence(steps: Sequence, env: Record<string, string>): Promise<number> {
    let code = 0;
    for (const [index, { step }] of steps.entries()) {
      if (index > 0 && steps[index - 1]!.and && code !== 0) continue;
      switch (step.kind) {
        case 'echo':
          this.print('stdout', step.words.map((word) => expandWord(word, env)).join(' '));
          code = 0;
          break;
        case 'sleep':
          await this.sleep(step.seconds * 1000);
          code = 0;
          break;
        case 'exit':
          this.end('exited', step.code);
          throw new Stopped();
        case 'status':
          code = step.code;
          break;
        case 'serve':
          await this.sleep(Number.POSITIVE_INFINITY);
          break;
        case 'for':
          for (const value of step.values) code = await this.sequence(step.body, { ...env, [step.variable]: expandWord(value, env) });
          break;
        case 'while':
          for (;;) {
            await this.sequence(step.body, env);
            // A loop whose body never waits would hold the event loop: a real shell would take a core.
            await this.sleep(0);
          }
      }
    }
    return code;
  }

  /** Waits; rejects with Stopped once a signal ended the job. */
  private sleep(ms: number): Promise<void> {
    if (this.stopSignal === 'SIGKILL' || this.ended) return Promise.reject(new Stopped());
    return new Promise((resolve, reject) => {
      const timer = Number.isFinite(ms) ? this.after(ms, () => { this.wakeSleep = null; resolve(); }) : null;
      this.wakeSleep = () => {
        if (timer) {
          clearTimeout(timer);
          this.timers.delete(timer);
        }
        this.wakeSleep = null;
        reject(new Stopped());
      };
    });
  }

  private signal(signal: 'SIGTERM' | 'SIGKILL'): void {
    if (this.finished) return;
    this.stopSignal = signal;
    this.wakeSleep?.();
    this.end('stopped', signalExitCode(signal));
  }

  private after(ms: number, action: () => void): NodeJS.Timeout {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      action();
    }, ms);
    this.timers.add(timer);
    return timer;
  }

  private print(stream: LogEntry['stream'], text: string): void {
    if (this.ended) return;
    this.lastSeq += 1;
    this.entries.push(JSON.stringify({ seq: this.lastSeq, ts: new Date().toISOString(), stream, text }));
    if (this.entries.length > this.maxLogLines) {
      this.entries.shift();
      this.firstSeq += 1;
    }
    this.waiters.wakeAll();
  }

  private end(state: JobState, exitCode: number | null): void {
    if (this.finished) return;
    const killed = this.stopSignal !== null && state === 'exited';
    this.status = { ...this.status, state: killed ? 'stopped' : state, exitCode, finishedAt: new Date().toISOString() };
    this.stateChanged();
    for (const timer of this.timers) clearTimeout(timer);
    this.timers.clear();
    this.ended = true;
    this.waiters.wakeAll();
  }
}
