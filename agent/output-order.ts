import type { JobLog } from './job-log.js';

type Stream = 'stdout' | 'stderr';

/**
 * Puts a process's stdout and stderr, read from two pipes, into its log in the order they were
 * written, as far as two pipes can tell. Output read in different turns of the event loop keeps its
 * order. Output of both pipes read in the same turn was waiting together (the agent was busy, or the
 * writes came at once) and nothing says which came first; the event loop would hand over stdout
 * first. Stderr goes first instead: the usual pair is a command that failed and the one that
 * answered it (`cmd || echo fallback`), and an answer never comes before its cause.
 */
export class OutputOrder {
  private waiting: { stream: Stream; chunk: Buffer }[] = [];
  private scheduled: NodeJS.Immediate | null = null;

  constructor(private readonly log: JobLog) {}

  /** The 'data' listener of one pipe. */
  reader(stream: Stream): (chunk: Buffer) => void {
    return (chunk) => {
      this.waiting.push({ stream, chunk });
      this.scheduled ??= setImmediate(() => this.flush());
    };
  }

  /** Writes what was read in this turn; also to be called once the pipes closed, before the log is. */
  flush(): void {
    if (this.scheduled) clearImmediate(this.scheduled);
    this.scheduled = null;
    const waiting = this.waiting;
    this.waiting = [];
    for (const stream of ['stderr', 'stdout'] as const) {
      for (const item of waiting) if (item.stream === stream) this.log.write(stream, item.chunk);
    }
  }
}
