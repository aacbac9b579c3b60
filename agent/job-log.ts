import { closeSync, openSync, readSync, rmSync, writeSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import type { LogEntry } from '../api/agent.js';
import { LineAssembler } from './line-assembler.js';
import { Waiters } from './waiters.js';

type Stream = LogEntry['stream'];

/** A job's log keeps at most this many bytes on disk unless told otherwise; the oldest part goes first. */
export const DEFAULT_MAX_LOG_BYTES = 1024 * 1024 * 1024;
/** A log is kept in this many files at least, so that rotating drops a part of it, never all of it. */
const SEGMENTS = 4;

/** One file of a log: consecutive entries from `firstSeq`, with the byte offset of each. */
interface Segment {
  file: string;
  fd: number;
  firstSeq: number;
  count: number;
  size: number;
  offsets: Float64Array;
}

/** Entries as their stored text: one JSON object a line, without a final newline. */
export interface RawEntries {
  jsonLines: string;
  count: number;
  firstSeq: number;
  lastSeq: number;
}

/**
 * The output of one job as numbered lines. Entries go to JSON-lines files (a job may print for days),
 * with only the byte offset of each entry kept in memory. Sequence numbers start at 1 and have no gaps;
 * once the files pass `maxBytes`, the oldest file is removed and its entries can no longer be read.
 * Lines that arrive in one piece of output are written to disk with one write.
 */
export class JobLog {
  private readonly segments: Segment[] = [];
  private count = 0;
  private pending: string[] = [];
  private disposed = false;
  private ended = false;
  private readonly waiters = new Waiters();
  private readonly decoders: Record<Stream, StringDecoder> = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  private readonly assemblers: Record<Stream, LineAssembler> = {
    stdout: new LineAssembler((text, ts) => this.append('stdout', text, ts)),
    stderr: new LineAssembler((text, ts) => this.append('stderr', text, ts)),
  };

  constructor(private readonly file: string, private readonly maxBytes = DEFAULT_MAX_LOG_BYTES) {
    this.segments.push(this.openSegment(1));
  }

  get lastSeq(): number {
    return this.count;
  }

  /** The oldest entry that can still be read (later than 1 once rotation dropped some). */
  get firstSeq(): number {
    return this.segments[0]?.firstSeq ?? this.count + 1;
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
    this.flush();
  }

  /** Flushes partial lines of both streams as entries and marks the log complete. */
  close(): void {
    if (this.ended) return;
    for (const stream of ['stdout', 'stderr'] as const) {
      const rest = this.decoders[stream].end();
      if (rest.length > 0) this.assemblers[stream].push(rest, new Date().toISOString());
      this.assemblers[stream].flush();
    }
    this.flush();
    this.ended = true;
    this.waiters.wakeAll();
  }

  /** Entries with seq > after, in order: at most `limit` of them and, beyond the first, at most `maxBytes` of JSON. */
  read(after: number, limit: number, maxBytes = Number.POSITIVE_INFINITY): LogEntry[] {
    const { jsonLines } = this.readRaw(after, limit, maxBytes);
    return jsonLines === '' ? [] : JSON.parse(`[${jsonLines.replaceAll('\n', ',')}]`) as LogEntry[];
  }

  /** As `read`, without parsing: entries that rotation dropped are skipped; a page never spans two files. */
  readRaw(after: number, limit: number, maxBytes = Number.POSITIVE_INFINITY): RawEntries {
    const none = { jsonLines: '', count: 0, firstSeq: after + 1, lastSeq: after };
    const first = Math.max(Math.floor(after) + 1, this.firstSeq);
    const segment = this.disposed ? undefined : this.segments.find((s) => first < s.firstSeq + s.count);
    if (!segment || limit <= 0) return none;
    const from = first - segment.firstSeq;
    let to = Math.min(segment.count, from + limit);
    const endOf = (index: number) => (index < segment.count ? segment.offsets[index]! : segment.size);
    const start = segment.offsets[from]!;
    if (endOf(to) - start > maxBytes) {
      let low = from + 1;
      while (low < to) {
        const middle = Math.ceil((low + to) / 2);
        if (endOf(middle) - start > maxBytes) to = middle - 1;
        else low = middle;
      }
    }
    const buffer = Buffer.allocUnsafe(endOf(to) - start);
    let read = 0;
    while (read < buffer.length) {
      const n = readSync(segment.fd, buffer, read, buffer.length - read, start + read);
      if (n === 0) break;
      read += n;
    }
    const jsonLines = buffer.toString('utf8', 0, Math.max(0, read - 1));
    return { jsonLines, count: to - from, firstSeq: first, lastSeq: segment.firstSeq + to - 1 };
  }

  /** Resolves when an entry after `after` exists, the log closes, or `ms` elapse; whichever comes first. */
  waitForEntries(after: number, ms: number): Promise<void> {
    if (this.count > after || this.ended || ms <= 0) return Promise.resolve();
    return this.waiters.wait(ms);
  }

  /** Releases the files; the log reads as empty afterwards. */
  dispose(): void {
    this.close();
    if (this.disposed) return;
    this.disposed = true;
    for (const segment of this.segments) closeSync(segment.fd);
  }

  private append(stream: Stream, text: string, ts: string): void {
    this.pending.push(JSON.stringify({ seq: this.count + this.pending.length + 1, ts, stream, text }));
  }

  /**
   * Writes the entries assembled from the last piece of output, one write per file: entries that
   * would take the current file past its share of the bound go to a new one.
   */
  private flush(): void {
    const lines = this.pending;
    this.pending = [];
    if (lines.length === 0 || this.disposed) return;
    const share = this.maxBytes / SEGMENTS;
    const sizes = lines.map((line) => Buffer.byteLength(line) + 1);
    let first = 0;
    while (first < lines.length) {
      let segment = this.segments[this.segments.length - 1]!;
      if (segment.size > 0 && segment.size + sizes[first]! > share) segment = this.rotate();
      let bytes = segment.size + sizes[first]!;
      let end = first + 1;
      while (end < lines.length && bytes + sizes[end]! <= share) bytes += sizes[end++]!;
      this.appendTo(segment, lines.slice(first, end), sizes.slice(first, end));
      first = end;
    }
    this.waiters.wakeAll();
  }

  /** Writes entries whose sizes (with their newline) are `sizes` at the end of the file. */
  private appendTo(segment: Segment, lines: readonly string[], sizes: readonly number[]): void {
    const buffer = Buffer.from(`${lines.join('\n')}\n`);
    let written = 0;
    while (written < buffer.length) written += writeSync(segment.fd, buffer, written, buffer.length - written, segment.size + written);
    if (segment.count + lines.length > segment.offsets.length) {
      const grown = new Float64Array(Math.max(segment.offsets.length * 2, segment.count + lines.length));
      grown.set(segment.offsets);
      segment.offsets = grown;
    }
    let offset = segment.size;
    for (const size of sizes) {
      segment.offsets[segment.count++] = offset;
      offset += size;
    }
    segment.size = offset;
    this.count += lines.length;
  }

  /** Starts a new file and removes the oldest ones while the log is over its bound. */
  private rotate(): Segment {
    const next = this.openSegment(this.count + 1);
    this.segments.push(next);
    let total = this.segments.reduce((sum, s) => sum + s.size, 0);
    while (this.segments.length > 1 && total > this.maxBytes - this.maxBytes / SEGMENTS) {
      const oldest = this.segments.shift()!;
      total -= oldest.size;
      closeSync(oldest.fd);
      rmSync(oldest.file, { force: true });
    }
    return next;
  }

  private openSegment(firstSeq: number): Segment {
    const file = firstSeq === 1 ? this.file : `${this.file}.${firstSeq}`;
    return { file, fd: openSync(file, 'w+'), firstSeq, count: 0, size: 0, offsets: new Float64Array(1024) };
  }
}
