import { LATENCY_BUCKETS_MS, type Replica, type ServiceStats } from '../api/services.js';
import { latencyQuantile, type ServiceWindow } from '../store/service-stats.js';

/** A service's request figures over a window, as the stats route and GET /metrics give them. */
export type ServiceFigures = Omit<ServiceStats, 'run' | 'windowSeconds' | 'readyReplicas' | 'desiredReplicas'>;

/** The histogram's last bucket has no upper bound; a quantile in it is reported as the largest bound, "a minute or more". */
const SLOWEST_BOUND_MS = LATENCY_BUCKETS_MS[LATENCY_BUCKETS_MS.length - 1];

function quantile(window: ServiceWindow | undefined, fraction: number): number | null {
  const value = window ? latencyQuantile(window.latency, fraction) : null;
  return value === null ? null : Math.min(value, SLOWEST_BOUND_MS);
}

export function serviceFigures(window: ServiceWindow | undefined, windowSeconds: number): ServiceFigures {
  const requests = window?.requests ?? 0;
  const errors = window?.errors ?? 0;
  return {
    requests,
    requestsPerSecond: requests / windowSeconds,
    errors,
    errorRate: requests === 0 ? 0 : errors / requests,
    p50Ms: quantile(window, 0.5),
    p99Ms: quantile(window, 0.99),
    inflight: window?.inflight ?? 0,
    inflightNow: window?.inflightNow ?? 0,
  };
}

/** A service's `ServiceStats`: its figures over the window, and how many of its replicas are ready of those it wants. */
export function serviceStats(run: string, windowSeconds: number, window: ServiceWindow | undefined, replicas: readonly Replica[], desiredReplicas: number): ServiceStats {
  return {
    run,
    windowSeconds,
    ...serviceFigures(window, windowSeconds),
    readyReplicas: replicas.filter((replica) => replica.state === 'ready').length,
    desiredReplicas,
  };
}
