import { truncate } from './table.js';

const FRAMES = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
const FRAME_MS = 100;
const CLEAR_LINE = '\r\x1b[K';

/** `failed: exited with code 7`: a status and its message, as every status line reads. */
export function statusLine(status: string, message: string): string {
  return message ? `${status}: ${message}` : status;
}

/**
 * Shows a run's status as it changes: one `status: message` line per change, written when the change
 * happens, so that status lines and other output (logs) read in the order they happened. On a terminal
 * a spinning line below the output also says how long the run has been in its current status.
 */
export class StatusDisplay {
  private current: { text: string; status: string; since: number } | null = null;
  private frame = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(private readonly stream: NodeJS.WriteStream = process.stderr) {}

  private get live(): boolean {
    return this.stream.isTTY === true;
  }

  update(status: string, message: string): void {
    const text = statusLine(status, message);
    if (text === this.current?.text) return;
    this.current = { text, status, since: Date.now() };
    this.around(() => this.stream.write(`${text}\n`));
    if (this.live && !this.timer) {
      this.timer = setInterval(() => this.draw(), FRAME_MS);
      this.timer.unref();
    }
  }

  /** Runs `write` (other output to the same terminal) with the spinner line out of the way. */
  around(write: () => void): void {
    if (this.spinning) this.stream.write(CLEAR_LINE);
    write();
    this.draw();
  }

  /** Stops the spinner and clears its line; the status lines stay. */
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    if (this.spinning) this.stream.write(CLEAR_LINE);
    this.current = null;
  }

  private get spinning(): boolean {
    return this.live && this.current !== null;
  }

  private draw(): void {
    if (!this.spinning) return;
    this.frame = (this.frame + 1) % FRAMES.length;
    const seconds = Math.floor((Date.now() - this.current!.since) / 1000);
    const width = (this.stream.columns || 80) - 3;
    this.stream.write(`${CLEAR_LINE}${FRAMES[this.frame]} ${truncate(`${this.current!.status} for ${seconds}s`, width)}`);
  }
}
