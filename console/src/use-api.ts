import { useEffect, useState } from 'preact/hooks';
import { call } from './api.js';

export interface ApiRead<T> {
  /** Null until the first answer. */
  data: T | null;
  /** The server's message when the last read failed; the last data read stays shown. */
  error: string | null;
  /** Reads again now (after a change made from the page). */
  reload: () => void;
}

/** `GET path`, read again every `refreshMs` when given, and whenever the path changes. */
export function useApi<T>(path: string, refreshMs?: number): ApiRead<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let current = true;
    const read = () => call<T>('GET', path).then(
      (answer) => { if (current) { setData(answer); setError(null); } },
      (failure) => { if (current) setError((failure as Error).message); });
    void read();
    const timer = refreshMs ? setInterval(() => void read(), refreshMs) : undefined;
    return () => { current = false; clearInterval(timer); };
  }, [path, refreshMs, tick]);
  useEffect(() => setData(null), [path]);
  return { data, error, reload: () => setTick((value) => value + 1) };
}
