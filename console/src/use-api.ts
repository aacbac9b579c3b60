import { useEffect, useState } from 'preact/hooks';
import { call } from './api.js';

export interface ApiRead<T> {
  /** Null until the first answer for this page. */
  data: T | null;
  /** The server's message when the last read failed; the last data read stays shown. */
  error: string | null;
  /** Reads again now (after a change made from the page). */
  reload: () => void;
}

const pageOf = (path: string) => path.split('?')[0];

/**
 * `GET path`, read again every `refreshMs` when given, whenever `version` changes (the live stream's version of that
 * list, api/live-runs.ts; null until the stream sends it, and nothing is read until then, so that opening a page
 * reads its list once) and whenever the path changes. While a changed query (a new filter) is read, the last
 * answer stays shown, so that the page does not jump; another page's answer never does.
 */
export function useApi<T>(path: string, refreshMs?: number, version?: string | null): ApiRead<T> {
  const [answer, setAnswer] = useState<{ path: string; data: T } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (version === null) return;
    let current = true;
    const read = () => call<T>('GET', path).then(
      (data) => { if (current) { setAnswer({ path, data }); setError(null); } },
      (failure) => { if (current) setError((failure as Error).message); });
    void read();
    const timer = refreshMs ? setInterval(() => void read(), refreshMs) : undefined;
    return () => { current = false; clearInterval(timer); };
  }, [path, refreshMs, tick, version]);
  const data = answer && pageOf(answer.path) === pageOf(path) ? answer.data : null;
  return { data, error, reload: () => setTick((value) => value + 1) };
}
