import type { LogLine, LogStreamItem, Run } from '../../api/objects.js';
import type { ComponentChildren } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { call, projectPath } from './api.js';
import { LogBuffer, type LogRow } from './log-buffer.js';
import { useVirtualRows } from './virtual-rows.js';

/** The view holds the newest lines only; Download and `orchestrator logs` give every line. */
const KEPT_LINES = 200_000;
/** Each row is one line high (long lines scroll sideways), so that the virtualiser need measure nothing. */
const ROW_PX = 18;

type Reading = 'connecting' | 'following' | 'ended' | 'failed';

const runLogsPath = (project: string, run: string) => `${projectPath(project)}/runs/${encodeURIComponent(run)}/logs`;

/** Runs resubmitted under `retry` keep each attempt's lines apart (`attempt=N`); a service's replicas and a schedule's runs do not. */
const hasAttempts = (run: Run) => run.kind !== 'service' && !run.schedule;

/**
 * A run's logs as they arrive, read from the server's follow stream (NDJSON): every attempt in turn, a mark where
 * each later one begins, each multi-node line with its rank. Only the rows in view are in the DOM; lines are
 * only ever text nodes. It follows the end until the reader scrolls up, and again from Jump to end.
 */
export function LogView({ project, run }: { project: string; run: Run }) {
  const [buffer] = useState(() => new LogBuffer(KEPT_LINES));
  const [, setVersion] = useState(0);
  const [reading, setReading] = useState<Reading>('connecting');
  const [follow, setFollow] = useState(true);
  const [query, setQuery] = useState('');
  const [downloading, setDownloading] = useState(false);
  const box = useRef<HTMLDivElement>(null);

  useEffect(() => {
    const abort = new AbortController();
    buffer.clear();
    setReading('connecting');
    readEveryAttempt(project, run, abort.signal, (rows) => {
      buffer.append(rows);
      setVersion(buffer.version);
    }, () => setReading('following')).then(() => setReading('ended'), () => {
      if (!abort.signal.aborted) setReading('failed');
    });
    return () => abort.abort();
  }, [project, run.name]);

  const matches = buffer.matching(query);
  const count = matches ? matches.length : buffer.length;
  const rows = useVirtualRows({ count, getScrollElement: () => box.current, estimateSize: () => ROW_PX, overscan: 20 });

  useLayoutEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight;
  });

  const onScroll = () => {
    const element = box.current!;
    const atEnd = element.scrollHeight - element.scrollTop - element.clientHeight < ROW_PX;
    if (!atEnd && follow) setFollow(false);
  };
  const toEnd = () => {
    setFollow(true);
    box.current!.scrollTop = box.current!.scrollHeight;
  };
  const download = () => {
    setDownloading(true);
    void downloadLogs(project, run).finally(() => setDownloading(false));
  };

  return (
    <div class="logs-panel">
      <div class="toolbar">
        <h3>Logs</h3>
        <span class={`follow follow-${reading}`}>{{ connecting: 'connecting…', following: 'reading live', ended: 'end of logs', failed: 'could not read the logs' }[reading]}</span>
        <input type="search" class="log-search" placeholder="Search the logs" aria-label="Search the logs" value={query}
          onInput={(event) => setQuery((event.target as HTMLInputElement).value)} />
        <span class="muted log-count">{query ? `${count.toLocaleString()} matching` : `${count.toLocaleString()} lines`}{buffer.trimmed ? ` (the oldest ${buffer.trimmed.toLocaleString()} not held; Download has them)` : ''}</span>
        <button aria-pressed={follow} onClick={() => (follow ? setFollow(false) : toEnd())}>{follow ? 'Following' : 'Follow'}</button>
        <button onClick={toEnd}>Jump to end</button>
        <button onClick={download} disabled={downloading}>{downloading ? 'Downloading…' : 'Download'}</button>
      </div>
      <div class="logs" ref={box} onScroll={onScroll} role="log" aria-live="off" tabIndex={0}>
        {count === 0 && <div class="muted">{query ? 'No line matches.' : reading === 'failed' ? '' : 'No output yet.'}</div>}
        <div class="log-rows" style={{ height: `${rows.getTotalSize()}px` }}>
          {rows.getVirtualItems().map((item) => {
            const row = buffer.at(matches ? matches[item.index]! : item.index);
            return <LogRowView key={item.key} row={row} top={item.start} query={query} />;
          })}
        </div>
      </div>
    </div>
  );
}

function LogRowView({ row, top, query }: { row: LogRow; top: number; query: string }) {
  const style = { transform: `translateY(${top}px)` };
  if (row.kind === 'attempt') return <div class="line attempt-mark" style={style}>{row.text}</div>;
  const { line } = row;
  return (
    <div class={line.stream === 'stderr' ? 'line stderr' : 'line'} style={style}>
      {line.node !== undefined && <span class="rank">[{line.node}] </span>}
      <Highlighted text={line.text} query={query} />
    </div>
  );
}

/** The text with each match of the query marked; every part a text node. */
function Highlighted({ text, query }: { text: string; query: string }) {
  if (!query) return <>{text}</>;
  const parts: ComponentChildren[] = [];
  const lower = text.toLowerCase();
  const needle = query.toLowerCase();
  let from = 0;
  for (let at = lower.indexOf(needle); at !== -1; at = lower.indexOf(needle, from)) {
    parts.push(text.slice(from, at), <mark>{text.slice(at, at + needle.length)}</mark>);
    from = at + needle.length;
  }
  parts.push(text.slice(from));
  return <>{parts}</>;
}

const attemptMark = (attempt: number): LogRow => ({ kind: 'attempt', attempt, text: `── attempt ${attempt} ──` });

/**
 * Reads the earlier attempts' lines whole, then follows the latest; when it ends and the run was submitted again,
 * follows the next attempt. Rows reach `deliver` at most once a frame.
 */
async function readEveryAttempt(project: string, run: Run, signal: AbortSignal, deliver: (rows: LogRow[]) => void, opened: () => void): Promise<void> {
  const path = runLogsPath(project, run.name);
  let pending: LogRow[] = [];
  const flush = () => {
    const rows = pending;
    pending = [];
    deliver(rows);
  };
  const add = (row: LogRow) => {
    if (pending.length === 0) requestAnimationFrame(flush);
    pending.push(row);
  };
  if (!hasAttempts(run)) {
    await readLines(`${path}?follow=true`, signal, (line) => add({ kind: 'line', line, attempt: 1 }), opened);
    return;
  }
  let attempt = 1;
  for (; attempt < run.attempt; attempt++) {
    add(attemptMark(attempt));
    await readLines(`${path}?format=jsonl&attempt=${attempt}`, signal, (line) => add({ kind: 'line', line, attempt }), () => undefined);
  }
  for (;;) {
    if (attempt > 1) add(attemptMark(attempt));
    const followed = attempt;
    await readLines(`${path}?follow=true&attempt=${followed}`, signal, (line) => add({ kind: 'line', line, attempt: followed }), opened);
    const latest = (await call<Run>('GET', `${projectPath(project)}/runs/${encodeURIComponent(run.name)}`)).attempt;
    if (latest <= attempt) break;
    attempt++;
  }
}

/** Reads an NDJSON log stream (`follow=true`'s LogStreamItems, or `format=jsonl`'s lines) to its end. */
async function readLines(url: string, signal: AbortSignal, onLine: (line: LogLine) => void, opened: () => void): Promise<void> {
  const response = await fetch(url, { signal, credentials: 'same-origin' });
  if (!response.ok || !response.body) throw new Error(`the server answered ${response.status}`);
  opened();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let rest = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const parts = (rest + value).split('\n');
    rest = parts.pop()!;
    for (const part of parts) {
      if (part === '') continue;
      const item = JSON.parse(part) as LogStreamItem | LogLine;
      if (!('type' in item)) onLine(item);
      else if (item.type === 'log') onLine(item.line);
    }
  }
}

/** Every line the server holds of every attempt, as text (a multi-node line with its rank), saved as `<run>.log`. */
async function downloadLogs(project: string, run: Run): Promise<void> {
  const path = runLogsPath(project, run.name);
  const latest = hasAttempts(run) ? (await call<Run>('GET', `${projectPath(project)}/runs/${encodeURIComponent(run.name)}`)).attempt : 1;
  const parts: string[] = [];
  for (let attempt = 1; attempt <= latest; attempt++) {
    if (latest > 1) parts.push(`── attempt ${attempt} ──\n`);
    await readLines(hasAttempts(run) ? `${path}?format=jsonl&attempt=${attempt}` : `${path}?format=jsonl`, new AbortController().signal,
      (line) => parts.push(`${line.node !== undefined ? `[${line.node}] ` : ''}${line.text}\n`), () => undefined);
  }
  const url = URL.createObjectURL(new Blob(parts, { type: 'text/plain;charset=utf-8' }));
  const link = document.createElement('a');
  link.href = url;
  link.download = `${run.name}.log`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
