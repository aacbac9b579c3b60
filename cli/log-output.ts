import type { LogLine } from '../api/objects.js';
import { logLineText } from './follow.js';

/** Past this many characters waiting, the text is written out. */
const FLUSH_CHARS = 64 * 1024;

/**
 * Writes many log lines fast: stdout lines to stdout, stderr lines to stderr, gathered into large
 * writes. The text waiting is written whenever the stream changes, so the two keep their order.
 */
export class LogOutput {
  private pending = '';
  private stream: LogLine['stream'] = 'stdout';

  write(line: LogLine): void {
    if (line.stream !== this.stream) {
      this.flush();
      this.stream = line.stream;
    }
    this.pending += `${logLineText(line)}\n`;
    if (this.pending.length >= FLUSH_CHARS) this.flush();
  }

  /** A message about the logs (not a log line), on stderr, in its place among the lines. */
  note(message: string): void {
    this.flush();
    process.stderr.write(`${message}\n`);
  }

  flush(): void {
    if (this.pending === '') return;
    (this.stream === 'stderr' ? process.stderr : process.stdout).write(this.pending);
    this.pending = '';
  }
}
