import type { LogLine, LogStreamItem } from '../../api/objects.js';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { projectPath } from './api.js';

/** The view keeps the newest lines only; older ones stay on the server (`orchestrator logs`). */
const KEPT_LINES = 5000;

type Following = 'connecting' | 'following' | 'ended' | 'failed';

/**
 * A run's logs as they arrive, read from the server's follow stream (NDJSON). Lines are only ever text nodes.
 * It keeps to the end while the reader is there, and stays put when they have scrolled up.
 */
export function LogView({ project, run }: { project: string; run: string }) {
  const [lines, setLines] = useState<LogLine[]>([]);
  const [following, setFollowing] = useState<Following>('connecting');
  const box = useRef<HTMLDivElement>(null);
  const atEnd = useRef(true);

  useEffect(() => {
    const abort = new AbortController();
    setLines([]);
    setFollowing('connecting');
    void (async () => {
      const response = await fetch(`${projectPath(project)}/runs/${encodeURIComponent(run)}/logs?follow=true`, { signal: abort.signal, credentials: 'same-origin' });
      if (!response.ok || !response.body) {
        setFollowing('failed');
        return;
      }
      setFollowing('following');
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      // Lines that arrive within one frame are drawn together, however many chunks they came in.
      let pending: LogLine[] = [];
      const flush = () => {
        const arrived = pending;
        pending = [];
        if (arrived.length) setLines((previous) => [...previous, ...arrived].slice(-KEPT_LINES));
      };
      let rest = '';
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        const parts = (rest + value).split('\n');
        rest = parts.pop()!;
        const arrived = parts.filter((part) => part !== '').map((part) => JSON.parse(part) as LogStreamItem)
          .flatMap((item) => item.type === 'log' ? [item.line] : []);
        if (arrived.length && pending.length === 0) requestAnimationFrame(flush);
        pending.push(...arrived);
      }
      flush();
      setFollowing('ended');
    })().catch(() => {
      if (!abort.signal.aborted) setFollowing('failed');
    });
    return () => abort.abort();
  }, [project, run]);

  useLayoutEffect(() => {
    if (atEnd.current && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [lines]);

  const onScroll = () => {
    const element = box.current!;
    atEnd.current = element.scrollHeight - element.scrollTop - element.clientHeight < 24;
  };
  const toEnd = () => {
    atEnd.current = true;
    box.current!.scrollTop = box.current!.scrollHeight;
  };
  return (
    <div class="logs-panel">
      <div class="toolbar">
        <h3>Logs</h3>
        <span class={`follow follow-${following}`}>{{ connecting: 'connecting…', following: 'following live', ended: 'end of logs', failed: 'could not read the logs' }[following]}</span>
        <button onClick={toEnd}>Jump to end</button>
      </div>
      <div class="logs" ref={box} onScroll={onScroll} role="log" aria-live="off" tabIndex={0}>
        {lines.length === 0 && following !== 'failed' && <div class="muted">No output yet.</div>}
        {lines.map((line) => (
          <div key={`${line.node ?? 0}:${line.seq}`} class={line.stream === 'stderr' ? 'line stderr' : 'line'}>
            {line.node !== undefined && <span class="rank">[{line.node}] </span>}{line.text}
          </div>
        ))}
      </div>
    </div>
  );
}
