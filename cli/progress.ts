import { truncate } from './table.js';

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const FRAME_MS = 100;
const CLEAR_LINE = '\r\x1b[K';

/**
 * Shows a run's status as it changes. On a terminal: one spinning line with the current status that
 * leaves a plain line behind for each status passed; elsewhere: one `status: message` line per change.
 */
export class StatusDisplay {
  private current: string | null = null;
  private frame = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly stream: NodeJS.WriteStream = process.stderr) {}

  private get live(): boolean {
    return this.stream.isTTY === true;
  }

  update(status: string, message: string): void {
    const text = message ? `${status}: ${message}` : status;
    if (text === this.current) return;
    if (!this.live) {
      this.stream.write(`${text}\n`);
      this.current = text;
      return;
    }
    if (this.current !== null) this.stream.write(`${CLEAR_LINE}  ${this.current}\n`);
    this.current = text;
    this.draw();
    if (!this.timer) {
      this.timer = setInterval(() => this.draw(), FRAME_MS);
      this.timer.unref();
    }
  }

  /** Runs `write` (other output to the same terminal) with the spinner line out of the way. */
  around(write: () => void): void {
    if (this.live && this.current !== null) this.stream.write(CLEAR_LINE);
    write();
    if (this.live && this.current !== null) this.draw();
  }

  /** Leaves the last status as a plain line and stops the spinner. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.live && this.current !== null) this.stream.write(`${CLEAR_LINE}  ${this.current}\n`);
    this.current = null;
  }

  private draw(): void {
    if (this.current === null) return;
    this.frame = (this.frame + 1) % FRAMES.length;
    const width = (this.stream.columns || 80) - 3;
    this.stream.write(`${CLEAR_LINE}${FRAMES[this.frame]} ${truncate(this.current, width)}`);
  }
}
