import { promisify } from 'node:util';
import { deflateRaw, deflateRawSync, inflateRaw, inflateRawSync } from 'node:zlib';
import type { LogLine } from '../api/objects.js';
import type { Queryable } from './db.js';
import { toInstance, type InstanceRecord } from './instances.js';

/**
 * A run's log lines live in chunks: one row per page copied from the agent, holding the lines as
 * JSON lines (one LogLine object a line), compressed unless short. Writing a page is one small row whatever its
 * length, and reading back is a few rows, so a job printing tens of thousands of lines a second
 * costs the database little. A page is stored only while the run's last stored line is still the
 * one it was asked for after, so a page copied twice (two copiers, a retry after a crash) is kept
 * once, and a gap between the two is lines the agent no longer had, never lines another copier
 * was storing.
 * `bytes` counts the JSON lines before compression; a run's limit is on that figure. The compressed
 * bytes travel as base64 text, which both drivers pass far faster than binary parameters.
 */

const compress = promisify(deflateRaw);
const decompress = promisify(inflateRaw);
/** Log text compresses well already at the fastest level, which keeps copying cheap. */
const COMPRESSION_LEVEL = 1;
/**
 * Shorter pages are stored as they are ('identity'): a line or two compresses to about its own size, and each
 * compression is a trip to libuv's thread pool; with 2 000 jobs printing a line a second, 7.5% of the server's CPU
 * (bench/README.md, "The watch loop's cost per look").
 */
const COMPRESSED_FROM_BYTES = 512;
/**
 * Smaller buffers are (de)compressed on the event loop: a trip to the thread pool costs the process more CPU than the
 * work itself at these sizes (a 500-byte page: about 150 µs in the pool against 10 µs on the loop; 50 kB: 0.1 ms either
 * way), and at 10 000 running jobs the pool's trips were a fifth of the server's CPU (bench/README.md, "Log pages
 * compressed on the event loop"). Larger ones go to the pool, so that the loop never stalls on a chatty job's page.
 */
const ON_THE_LOOP_BELOW_BYTES = 64 * 1024;
/** Log text deflates to about a sixth of its size: a compressed page this long or longer holds ON_THE_LOOP_BELOW_BYTES of text. */
const INFLATED_ON_THE_LOOP_BELOW_BYTES = ON_THE_LOOP_BELOW_BYTES / 6;

function deflated(text: Buffer): Buffer | Promise<Buffer> {
  return text.length < ON_THE_LOOP_BELOW_BYTES ? deflateRawSync(text, { level: COMPRESSION_LEVEL }) : compress(text, { level: COMPRESSION_LEVEL });
}

function inflated(bytes: Buffer): Buffer | Promise<Buffer> {
  return bytes.length < INFLATED_ON_THE_LOOP_BELOW_BYTES ? inflateRawSync(bytes) : decompress(bytes);
}

/** Consecutive lines `first` to `last`, as JSON lines without a final newline, read from the agent after line `after`. */
export interface LogChunk {
  after: number;
  first: number;
  last: number;
  jsonLines: string;
}

export interface LogAppend {
  /** False when the run's last stored line was no longer `after`: the caller asks again from there. */
  stored: boolean;
  /** Lines this append found gone: dropped to stay under the run's limit, or lost at the agent. */
  droppedLines: number;
  /** Whether these are the run's first lost lines. */
  firstLoss: boolean;
}

/** Stores lines read after line `after` (by default, the line before the first). */
export async function appendLogs(db: Queryable, runId: string, lines: readonly LogLine[], maxBytes: number, after = lines[0].seq - 1): Promise<LogAppend> {
  const jsonLines = lines.map((line) => JSON.stringify(line)).join('\n');
  return appendLogChunk(db, runId, { after, first: lines[0].seq, last: lines[lines.length - 1].seq, jsonLines }, maxBytes);
}

/** Stores one page of lines copied from the agent; past `maxBytes` for the run, the oldest chunks go. */
export async function appendLogChunk(db: Queryable, runId: string, chunk: LogChunk, maxBytes: number): Promise<LogAppend> {
  return (await appendLogChunks(db, [{ runId, ...chunk }], maxBytes)).get(runId)!;
}

/**
 * Stores one page of lines for each of several runs (each run at most once) in one statement, each page only where its
 * run's last stored line is still its `after`; past `maxBytes` for a run, its oldest chunks go.
 */
export async function appendLogChunks(db: Queryable, chunks: ReadonlyArray<LogChunk & { runId: string }>, maxBytes: number): Promise<Map<string, LogAppend>> {
  const outcomes = new Map<string, LogAppend>(chunks.map((chunk) => [chunk.runId, { stored: false, droppedLines: 0, firstLoss: false }]));
  if (chunks.length === 0) return outcomes;
  const texts = chunks.map((chunk) => Buffer.from(chunk.jsonLines));
  const compressed = texts.map((text) => text.length >= COMPRESSED_FROM_BYTES);
  const data = await Promise.all(texts.map((text, index) => (compressed[index] ? deflated(text) : text)));
  const totals = await db.query<{ run_id: string; bytes: string; dropped_lines: number; dropped_before: number | null }>(
    `WITH input AS (
       SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::int[], $5::text[], $6::int[], $7::text[]) AS i(run_id, first_seq, last_seq, bytes, data, after, encoding)),
     chunk AS (
       INSERT INTO log_chunks (run_id, first_seq, last_seq, bytes, encoding, data)
       SELECT i.run_id, i.first_seq, i.last_seq, i.bytes, i.encoding, decode(i.data, 'base64') FROM input i
       WHERE coalesce((SELECT last_seq FROM log_totals WHERE run_id = i.run_id), 0) = i.after
       ON CONFLICT (run_id, first_seq) DO NOTHING
       RETURNING run_id, first_seq, last_seq, bytes)
     INSERT INTO log_totals AS t (run_id, last_seq, bytes, dropped_lines)
     SELECT c.run_id, c.last_seq, c.bytes, c.first_seq - 1 - i.after FROM chunk c JOIN input i ON i.run_id = c.run_id
     ON CONFLICT (run_id) DO UPDATE SET last_seq = excluded.last_seq, bytes = t.bytes + excluded.bytes,
       dropped_lines = t.dropped_lines + excluded.dropped_lines
     RETURNING t.run_id, t.bytes, t.dropped_lines, (SELECT dropped_lines FROM log_totals WHERE run_id = t.run_id) AS dropped_before`,
    [chunks.map((c) => c.runId), chunks.map((c) => c.first), chunks.map((c) => c.last), texts.map((t) => t.length),
      data.map((d) => d.toString('base64')), chunks.map((c) => c.after), compressed.map((yes) => (yes ? 'deflate' : 'identity'))]);
  for (const total of totals) {
    const before = total.dropped_before ?? 0;
    const excess = Number(total.bytes) - maxBytes;
    const trimmed = excess > 0 ? await trimOldest(db, total.run_id, Math.ceil(excess)) : 0;
    const droppedLines = total.dropped_lines - before + trimmed;
    outcomes.set(total.run_id, { stored: true, droppedLines, firstLoss: before === 0 && droppedLines > 0 });
  }
  return outcomes;
}

/** Drops the oldest chunks until `excess` bytes are gone, always keeping the newest; returns the lines dropped. */
async function trimOldest(db: Queryable, runId: string, excess: number): Promise<number> {
  const [trimmed] = await db.query<{ lines: number | null }>(
    `WITH ordered AS (
       SELECT first_seq, sum(bytes) OVER (ORDER BY first_seq) - bytes AS bytes_before,
         first_seq = max(first_seq) OVER () AS newest
       FROM log_chunks WHERE run_id = $1),
     removed AS (
       DELETE FROM log_chunks c USING ordered o
       WHERE c.run_id = $1 AND c.first_seq = o.first_seq AND o.bytes_before < $2 AND NOT o.newest
       RETURNING c.last_seq - c.first_seq + 1 AS lines, c.bytes)
     UPDATE log_totals SET bytes = bytes - (SELECT coalesce(sum(bytes), 0) FROM removed),
       dropped_lines = dropped_lines + (SELECT coalesce(sum(lines), 0) FROM removed)
     WHERE run_id = $1
     RETURNING (SELECT sum(lines) FROM removed)::int AS lines`,
    [runId, excess]);
  return trimmed?.lines ?? 0;
}

/** About how much log text (before compression) one read of chunks carries; the first chunk comes whatever its size. */
const BYTES_PER_QUERY = 1024 * 1024;
/** The most chunks one read weighs, so that reading a long log from its start costs each query the same. */
const CHUNKS_WEIGHED_PER_QUERY = 10_000;

/**
 * The JSON lines of the stored lines after `after`, chunk by chunk, up to line `until`; never parsed.
 * Each query brings the chunks that fit in BYTES_PER_QUERY, so a job that printed a line a second for an hour (3 600
 * chunks of one line) is read in one query, and a chatty one's text never all at once.
 */
export async function* logLinesAfter(db: Queryable, runId: string, after: number, until = Number.MAX_SAFE_INTEGER): AsyncGenerator<string> {
  let cursor = after;
  for (;;) {
    const rows = await db.query<{ first_seq: number; last_seq: number; encoding: string; data: string; position: string; weighed: string }>(
      `SELECT first_seq, last_seq, encoding, encode(data, 'base64') AS data, position, weighed FROM (
         SELECT first_seq, last_seq, encoding, data, sum(bytes) OVER (ORDER BY first_seq) - bytes AS bytes_before,
           row_number() OVER (ORDER BY first_seq) AS position, count(*) OVER () AS weighed
         FROM (SELECT * FROM log_chunks WHERE run_id = $1 AND last_seq > $2 AND first_seq <= $3 ORDER BY first_seq LIMIT $5) next) chunks
       WHERE bytes_before < $4 ORDER BY first_seq`,
      [runId, cursor, Math.min(until, 2 ** 31 - 1), BYTES_PER_QUERY, CHUNKS_WEIGHED_PER_QUERY]);
    for (const row of rows) {
      const text = await chunkText(row.encoding, row.data);
      yield linesBetween(text, cursor + 1 - row.first_seq, row.last_seq > until ? until - row.first_seq + 1 : Number.POSITIVE_INFINITY);
      cursor = Math.min(row.last_seq, until);
    }
    const last = rows[rows.length - 1];
    const moreLeft = last !== undefined && (Number(last.position) < Number(last.weighed) || Number(last.weighed) === CHUNKS_WEIGHED_PER_QUERY);
    if (!moreLeft || cursor >= until) return;
  }
}

export interface LogPage {
  lines: LogLine[];
  /** Lines that no longer exist before the first one returned (over the run's limit, or lost at the agent). */
  dropped: number;
}

export async function readLogs(db: Queryable, runId: string, after: number, limit = 5000): Promise<LogLine[]> {
  return (await readLogPage(db, runId, after, limit)).lines;
}

/** Lines after `after`, in order: whole chunks until at least `limit` lines (or none are left). */
export async function readLogPage(db: Queryable, runId: string, after: number, limit = 5000): Promise<LogPage> {
  const lines: LogLine[] = [];
  for await (const jsonLines of logLinesAfter(db, runId, after)) {
    if (jsonLines !== '') for (const line of jsonLines.split('\n')) lines.push(JSON.parse(line) as LogLine);
    if (lines.length >= limit) break;
  }
  return { lines, dropped: lines.length > 0 ? Math.max(0, lines[0].seq - after - 1) : 0 };
}

export async function lastLogSeq(db: Queryable, runId: string): Promise<number> {
  return (await logTotals(db, runId)).lastSeq;
}

/**
 * A run's instance and the last line the database holds for the run, in one statement (a `logs` request waits for
 * each of its statements in turn); null when the instance is gone.
 */
export async function instanceAndLastLogSeq(db: Queryable, instanceId: string, runId: string): Promise<{ instance: InstanceRecord; lastSeq: number } | null> {
  const [row] = await db.query(
    'SELECT i.*, coalesce((SELECT last_seq FROM log_totals WHERE run_id = $2), 0) AS last_log_seq FROM instances i WHERE i.id = $1', [instanceId, runId]);
  return row ? { instance: toInstance(row), lastSeq: row.last_log_seq as number } : null;
}

/** The last line the database holds for each of these runs, by run id; 0 for a run with none. */
export async function lastLogSeqs(db: Queryable, runIds: readonly string[]): Promise<Map<string, number>> {
  const rows = await db.query<{ run_id: string; last_seq: number }>('SELECT run_id, last_seq FROM log_totals WHERE run_id = ANY($1::text[])', [runIds]);
  const found = new Map(rows.map((row) => [row.run_id, row.last_seq]));
  return new Map(runIds.map((id) => [id, found.get(id) ?? 0]));
}

export interface LogTotals {
  lastSeq: number;
  bytes: number;
  droppedLines: number;
}

export async function logTotals(db: Queryable, runId: string): Promise<LogTotals> {
  const [row] = await db.query('SELECT last_seq, bytes, dropped_lines FROM log_totals WHERE run_id = $1', [runId]);
  return { lastSeq: row?.last_seq ?? 0, bytes: Number(row?.bytes ?? 0), droppedLines: row?.dropped_lines ?? 0 };
}

async function chunkText(encoding: string, base64: string): Promise<string> {
  const bytes = Buffer.from(base64, 'base64');
  return (encoding === 'deflate' ? await inflated(bytes) : bytes).toString('utf8');
}

/** The lines of `text` from index `from` up to, not including, index `to`, found by their newlines. */
function linesBetween(text: string, from: number, to: number): string {
  let start = 0;
  for (let skipped = 0; skipped < from && start !== -1; skipped++) start = text.indexOf('\n', start) + 1 || -1;
  if (start === -1) return '';
  if (to === Number.POSITIVE_INFINITY) return text.slice(start);
  let end = start;
  for (let kept = from; kept < to && end !== -1; kept++) end = text.indexOf('\n', end) + 1 || -1;
  return end === -1 ? text.slice(start) : text.slice(start, end - 1);
}
