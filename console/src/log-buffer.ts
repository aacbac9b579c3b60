import type { LogLine } from '../../api/objects.js';

/** A line of the view: a log line of an attempt, or the mark where a later attempt's lines begin. */
export type LogRow = { kind: 'line'; line: LogLine; attempt: number } | { kind: 'attempt'; attempt: number; text: string };

/**
 * The lines a log view holds: appended in place (no copy per batch), trimmed to the newest `capacity` in bulk, and
 * searched incrementally, so that following thousands of lines a second costs the new lines only.
 */
export class LogBuffer {
  private rows: LogRow[] = [];
  /** Rows trimmed from the front so far: a row's absolute number is `dropped + its index`. */
  private dropped = 0;
  private search = { query: '', scanned: 0, matches: [] as number[] };
  /** Changes whenever rows are added or trimmed, for views to know they must draw again. */
  version = 0;

  constructor(private readonly capacity: number) {}

  append(rows: LogRow[]): void {
    if (rows.length === 0) return;
    for (const row of rows) this.rows.push(row);
    // Trimmed a tenth at a time, so that a full buffer does not move every row on every batch.
    if (this.rows.length > this.capacity * 1.1) {
      const over = this.rows.length - this.capacity;
      this.rows.splice(0, over);
      this.dropped += over;
    }
    this.version++;
  }

  clear(): void {
    this.rows = [];
    this.dropped = 0;
    this.search = { query: '', scanned: 0, matches: [] };
    this.version++;
  }

  /** Lines no longer held (older than the newest `capacity`). */
  get trimmed(): number {
    return this.dropped;
  }

  get length(): number {
    return this.rows.length;
  }

  at(index: number): LogRow {
    return this.rows[index]!;
  }

  /**
   * The indexes of the rows that contain `query` (case-insensitive), and the attempt marks; every row for an empty
   * query. Only rows added since the last call are searched.
   */
  matching(query: string): number[] | null {
    if (query === '') return null;
    const needle = query.toLowerCase();
    if (this.search.query !== needle) this.search = { query: needle, scanned: this.dropped, matches: [] };
    const { search } = this;
    const firstKept = search.matches.findIndex((absolute) => absolute >= this.dropped);
    if (firstKept !== 0) search.matches.splice(0, firstKept === -1 ? search.matches.length : firstKept);
    for (let absolute = Math.max(search.scanned, this.dropped); absolute < this.dropped + this.rows.length; absolute++) {
      const row = this.rows[absolute - this.dropped]!;
      if (row.kind === 'attempt' || row.line.text.toLowerCase().includes(needle)) search.matches.push(absolute);
    }
    search.scanned = this.dropped + this.rows.length;
    return search.matches.map((absolute) => absolute - this.dropped);
  }
}
