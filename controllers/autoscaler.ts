import type { GroupSettings } from '../api/service-settings.js';
import type { ServiceWindow } from '../store/service-stats.js';

export interface ScaleInput {
  /** The service's count range and scaling, or one replica group's. */
  settings: Pick<GroupSettings, 'replicas' | 'scaling'>;
  /** The replica count the service (or group) aims for now. */
  current: number;
  /** When that count last changed (or the service started). */
  scaledAt: Date;
  /** Requests over the scaling window (null: none recorded). */
  window: ServiceWindow | null;
  now: number;
}

/**
 * The replica count a service should aim for: fixed replicas as written; with scaling, ceil(metric / target)
 * within the range, moving up only scale_up_delay after the last change and down only scale_down_delay after it.
 * A service at zero replicas that gets a request scales up at once: the request is waiting.
 */
export function desiredReplicas({ settings, current, scaledAt, window, now }: ScaleInput): number {
  const { min, max } = settings.replicas;
  const scaling = settings.scaling;
  if (!scaling) return min;
  const metric = !window ? 0 : scaling.metric === 'rps' ? window.requests / scaling.windowSeconds : window.inflight;
  const wanted = Math.min(max, Math.max(min, Math.ceil(metric / scaling.target)));
  const clamped = Math.min(max, Math.max(min, current));
  if (clamped !== current) return clamped;
  const since = now - scaledAt.getTime();
  if (wanted > current && (current === 0 || since >= scaling.upDelayMs)) return wanted;
  if (wanted < current && since >= scaling.downDelayMs) return wanted;
  return current;
}
