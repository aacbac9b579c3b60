import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import type { LogEntry } from '../api/agent.js';
import { LineAssembler } from './line-assembler.js';

type Stream = LogEntry['stream'];

/**
 * The output of one job as numbered lines. Entries go to a JSON-lines file (a job may print for days),
 * with only the byte offset of each entry kept in memory. Sequence numbers start at 1 and have no gaps.
 */
export class JobLog {
  private offsets = new Float64Array(1024);
  private count = 0;
  private size = 0;
  private fd: number | null;
  private ended = false;
  private readonly waiters = new Set<() => void>();
  private readonly decoders: Record<Stream, StringDecoder> = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  private readonly assemblers: Record<Stream, LineAssembler> = {
    stdout: new LineAssembler((text, ts) => this.append('stdout', text, ts)),
    stderr: new LineAssembler((text, ts) => this.append('stderr', text, ts)),
  };

  constructor(file: string) {
    this.fd = openSync(file, 'w+');
  }

  get lastSeq(): number {
    return this.count;
  }

  /** True once the job's output has ended: no entry will be added any more. */
  get closed(): boolean {
    return this.ended;
  }

  /** Raw output of one stream; `ts` is when it was produced (ISO 8601). Ignored once closed. */
  write(stream: Stream, data: Buffer, ts: string = new Date().toISOString()): void {
    if (this.ended) return;
    const text = this.decoders[stream].write(data);
    if (text.length > 0) this.assemblers[stream].push(text, ts);
  }

  /** Flushes partial lines of both streams as entries and marks the log complete. */
  close(): void {
    if (this.ended) return;
    for (const stream of ['stdout', 'stderr'] as const) {
      const rest = this.decoders[stream].end();
      if (rest.length > 0) this.assemblers[stream].push(rest, new Date().toISOString());
      this.assemblers[stream].flush();
    }
    this.ended = true;
    this.wake();
  }

  /** Entries with seq > after, in order: at most `limit` of them and, beyond the first, at most `maxBytes` of JSON. */
  read(after: number, limit: number, maxBytes = Number.POSITIVE_INFINITY): LogEntry[] {
    const first = Math.max(0, Math.floor(after));
    let last = Math.min(this.count, first + limit);
    if (this.fd === null || first >= last) return [];
    const start = this.offsets[first]!;
    const endOf = (index: number) => (index < this.count ? this.offsets[index]! : this.size);
    if (endOf(last) - start > maxBytes) {
      let low = first + 1;
      while (low < last) {
        const middle = Math.ceil((low + last) / 2);
        if (endOf(middle) - start > maxBytes) last = middle - 1;
        else low = middle;
      }
    }
    const end = endOf(last);
    const buffer = Buffer.allocUnsafe(end - start);
    let read = 0;
    while (read < buffer.length) {
      const n = readSync(this.fd, buffer, read, buffer.length - read, start + read);
      if (n === 0) break;
      read += n;
    }
    return buffer.toString('utf8', 0, read).split('\n').slice(0, last - first).map((line) => JSON.parse(line) as LogEntry);
  }

  /** Resolves when an entry after `after` exists, the log closes, or `ms` elapse; whichever comes first. */
  waitForEntries(after: number, ms: number): Promise<void> {
    if (this.count > after || this.ended || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }

  /** Releases the file; the log reads as empty afterwards. */
  dispose(): void {
    this.close();
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private append(stream: Stream, text: string, ts: string): void {
    if (this.fd === null) return;
    const seq = this.count + 1;
    const line = Buffer.from(JSON.stringify({ seq, ts, stream, text }) + '\n');
    let written = 0;
    while (written < line.length) written += writeSync(this.fd, line, written, line.length - written, this.size + written);
    if (this.count === this.offsets.length) {
      const grown = new Float64Array(this.offsets.length * 2);
      grown.set(this.offsets);
      this.offsets = grown;
    }
    this.offsets[this.count] = this.size;
    this.count = seq;
    this.size += line.length;
    this.wake();
  }

  private wake(): void {
    if (this.waiters.size === 0) return;
    for (const waiter of [...this.waiters]) waiter();
  }
}
