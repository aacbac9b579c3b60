import { LATENCY_BUCKETS_MS } from '../api/services.js';
import type { Queryable } from './db.js';

/** What one gateway process saw of one service in one second. */
export interface ServiceSecond {
  runId: string;
  /** The second, truncated: `Math.floor(Date.now() / 1000) * 1000`. */
  second: Date;
  requests: number;
  /** Answers with status 5xx, and exchanges that failed before an answer. */
  errors: number;
  /** The most requests in flight at once during the second, requests held for a replica included. */
  inflight: number;
  /** Counts per bucket of LATENCY_BUCKETS_MS, plus one for slower (length LATENCY_BUCKETS_MS.length + 1). */
  latency: number[];
}

/** Sums of a service's seconds over a window, from every gateway process that wrote them. */
export interface ServiceWindow {
  requests: number;
  errors: number;
  /** The largest per-second sum of in-flight requests across processes. */
  inflight: number;
  /** The same over this second and the one before: what is in flight now (the current second may not be written yet). */
  inflightNow: number;
  latency: number[];
}

/**
 * Writes a batch of seconds. Each process writes under its own `source`, and the same second of the same
 * source again adds to it (a process that flushes a second in two parts), so several servers add up.
 */
export async function recordServiceSeconds(db: Queryable, source: string, seconds: ServiceSecond[]): Promise<void> {
  if (seconds.length === 0) return;
  await db.query(
    `INSERT INTO service_stats (run_id, second, source, requests, errors, inflight, latency)
     SELECT s.run_id, s.second, $1, s.requests, s.errors, s.inflight, s.latency
     FROM jsonb_to_recordset($2::jsonb) AS s(run_id text, second timestamptz, requests int, errors int, inflight int, latency jsonb)
     WHERE EXISTS (SELECT 1 FROM runs WHERE runs.id = s.run_id)
     ON CONFLICT (run_id, second, source) DO UPDATE SET
       requests = service_stats.requests + EXCLUDED.requests,
       errors = service_stats.errors + EXCLUDED.errors,
       inflight = GREATEST(service_stats.inflight, EXCLUDED.inflight),
       latency = (SELECT jsonb_agg(coalesce((service_stats.latency->>i)::int, 0) + coalesce((EXCLUDED.latency->>i)::int, 0) ORDER BY i)
                  FROM generate_series(0, ${LATENCY_BUCKETS_MS.length}) AS i)`,
    [source, seconds.map((s) => ({
      run_id: s.runId, second: s.second.toISOString(), requests: s.requests, errors: s.errors, inflight: s.inflight, latency: s.latency,
    }))]);
}

/** Each service's sums over the last `windowSeconds` complete and current seconds. */
export async function serviceWindows(db: Queryable, runIds: string[], windowSeconds: number): Promise<Map<string, ServiceWindow>> {
  if (runIds.length === 0) return new Map();
  const rows = await db.query<SecondRow & { run_id: string }>(
    `SELECT run_id, second, requests, errors, inflight, latency, second >= date_trunc('second', now()) - interval '1 second' AS recent
     FROM service_stats WHERE run_id = ANY($1::text[]) AND second > now() - $2 * interval '1 second'`, [runIds, windowSeconds]);
  return sumSeconds(rows, (row) => row.run_id);
}

/**
 * One service's sums over each step of `stepSeconds` from `since` on, keyed by the step's start (ms since the epoch,
 * a multiple of the step); steps without a written second are absent.
 */
export async function serviceSteps(db: Queryable, runId: string, since: Date, stepSeconds: number): Promise<Map<number, ServiceWindow>> {
  const rows = await db.query<SecondRow & { step: string }>(
    `SELECT floor(extract(epoch from second) / $3::int)::bigint * $3::int * 1000 AS step, second, requests, errors, inflight, latency,
            second >= date_trunc('second', now()) - interval '1 second' AS recent
     FROM service_stats WHERE run_id = $1 AND second >= $2`, [runId, since.toISOString(), stepSeconds]);
  return sumSeconds(rows, (row) => Number(row.step));
}

interface SecondRow {
  second: Date;
  requests: number;
  errors: number;
  inflight: number;
  latency: number[];
  recent: boolean;
}

/** Adds up seconds (of every gateway process) into a window per key. */
function sumSeconds<K, R extends SecondRow>(rows: R[], keyOf: (row: R) => K): Map<K, ServiceWindow> {
  const windows = new Map<K, ServiceWindow>();
  const inflightBySecond = new Map<string, number>();
  for (const row of rows) {
    const key = keyOf(row);
    const window = windows.get(key) ?? { requests: 0, errors: 0, inflight: 0, inflightNow: 0, latency: new Array(LATENCY_BUCKETS_MS.length + 1).fill(0) };
    windows.set(key, window);
    window.requests += row.requests;
    window.errors += row.errors;
    row.latency.forEach((count, i) => { window.latency[i] = (window.latency[i] ?? 0) + count; });
    const second = `${key} ${new Date(row.second).getTime()}`;
    const inflight = (inflightBySecond.get(second) ?? 0) + row.inflight;
    inflightBySecond.set(second, inflight);
    window.inflight = Math.max(window.inflight, inflight);
    if (row.recent) window.inflightNow = Math.max(window.inflightNow, inflight);
  }
  return windows;
}

/** The latency below which `fraction` of the requests fell, read from the histogram (the bucket's upper bound). */
export function latencyQuantile(latency: number[], fraction: number): number | null {
  const total = latency.reduce((sum, count) => sum + count, 0);
  if (total === 0) return null;
  let seen = 0;
  for (const [i, count] of latency.entries()) {
    seen += count;
    if (seen >= fraction * total) return LATENCY_BUCKETS_MS[i] ?? Number.POSITIVE_INFINITY;
  }
  return Number.POSITIVE_INFINITY;
}

/** Statistics are kept for an hour: enough for any window a service scales on or a user looks at. */
export async function pruneServiceStats(db: Queryable): Promise<void> {
  await db.query(`DELETE FROM service_stats WHERE second < now() - interval '1 hour'`);
}
