import { LATENCY_BUCKETS_MS } from '../../api/services.js';

/** A second's latency histogram: `fast` requests under 10 ms and `slow` ones under 500 ms. */
export function latencies(fast: number, slow: number): number[] {
  const counts = new Array<number>(LATENCY_BUCKETS_MS.length + 1).fill(0);
  counts[LATENCY_BUCKETS_MS.indexOf(10)] = fast;
  counts[LATENCY_BUCKETS_MS.indexOf(500)] = slow;
  return counts;
}

/** A service that stays up without a fleet or a replica: `replicas: 0` starts nothing, whatever its requests. */
export const IDLE_SERVICE = { type: 'service', name: 'svc', port: 8000, commands: ['sleep 600'], replicas: 0 };

/** The second now, as the gateway writes it. */
export function thisSecond(): number {
  return Math.floor(Date.now() / 1000) * 1000;
}
