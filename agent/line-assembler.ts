/** Longest text one log entry carries; longer lines (progress bars without newlines) are cut into several entries. */
export const MAX_LINE_CHARS = 16_384;

/**
 * Turns a stream of text pieces into whole lines. A line carries the timestamp of its first piece;
 * a trailing partial line stays pending until more text or `flush()` arrives.
 */
export class LineAssembler {
  private pending = '';
  private pendingTs: string | null = null;

  constructor(private readonly emit: (text: string, ts: string) => void) {}

  push(text: string, ts: string): void {
    let start = 0;
    for (let newline = text.indexOf('\n'); newline >= 0; newline = text.indexOf('\n', start)) {
      const line = this.pending + text.slice(start, newline);
      const lineTs = this.pendingTs ?? ts;
      this.pending = '';
      this.pendingTs = null;
      this.emitLine(line.endsWith('\r') ? line.slice(0, -1) : line, lineTs);
      start = newline + 1;
    }
    if (start >= text.length) return;
    this.pendingTs ??= ts;
    this.pending += text.slice(start);
    while (this.pending.length >= MAX_LINE_CHARS) {
      this.emit(this.pending.slice(0, MAX_LINE_CHARS), this.pendingTs);
      this.pending = this.pending.slice(MAX_LINE_CHARS);
    }
    if (this.pending.length === 0) this.pendingTs = null;
  }

  flush(): void {
    if (this.pendingTs === null) return;
    const line = this.pending;
    const ts = this.pendingTs;
    this.pending = '';
    this.pendingTs = null;
    this.emitLine(line, ts);
  }

  private emitLine(line: string, ts: string): void {
    for (let offset = 0; offset < line.length; offset += MAX_LINE_CHARS) {
      this.emit(line.slice(offset, offset + MAX_LINE_CHARS), ts);
    }
    if (line.length === 0) this.emit('', ts);
  }
}
