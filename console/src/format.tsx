import { formatDollars, type GpuInfo } from '../../api/offer.js';
import { useEffect, useState } from 'preact/hooks';

/** Re-renders its caller every `ms`, so that relative times stay true. */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(timer);
  }, [ms]);
  return now;
}

export function relativeTime(iso: string, now: number): string {
  const seconds = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86_400)}d ago`;
}

/** A time shown relative, with the exact time on hover. */
export function Age({ at, now }: { at: string | null; now: number }) {
  if (!at) return <span class="muted">—</span>;
  return <time dateTime={at} title={new Date(at).toString()}>{relativeTime(at, now)}</time>;
}

export function gpuText(gpu: GpuInfo | null): string {
  if (!gpu || gpu.count === 0) return '—';
  return `${gpu.count}×${gpu.name}${gpu.memoryMib ? ` ${Math.round(gpu.memoryMib / 1024)}GB` : ''}`;
}

export function priceText(pricePerHour: number | null): string {
  if (pricePerHour === null) return '—';
  return `${formatDollars(pricePerHour)}/h`;
}

/** Dollars spent so far, from the ledger; a dash for nothing yet (a queued run, an instance not yet created). */
export function costText(cost: number): string {
  return cost > 0 ? formatDollars(cost) : '—';
}
