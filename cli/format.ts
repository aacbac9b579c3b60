import { formatGpu, formatSize, parseSize } from '../api/resources.js';
import { formatDollars, type GpuInfo } from '../api/offer.js';

export { formatSize } from '../api/resources.js';

const MIB_PER_UNIT: Record<string, number> = { MB: 1, GB: 1024, TB: 1024 * 1024 };
const NOTHING = '-';
/** A size as `formatSize` writes it; case-sensitive so that a lower-case name such as `24gb` stays a name. */
const SIZE_CELL = /^\d+(?:\.\d+)?[MGT]B$/;

/**
 * A column of sizes (`1TB`, `1800GB`, `-`) written in one unit, the unit of its largest size, so that
 * values can be compared at a glance: `1024GB` next to `1800GB`. Any other column is returned as it is.
 */
export function inOneUnit(column: readonly string[]): readonly string[] {
  const sizes = column.filter((cell) => cell !== NOTHING);
  if (sizes.length === 0 || !sizes.every((cell) => SIZE_CELL.test(cell))) return column;
  const unit = formatSize(Math.max(...sizes.map((cell) => parseSize(cell)))).slice(-2);
  return column.map((cell) => (cell === NOTHING ? cell : `${Number((parseSize(cell) / MIB_PER_UNIT[unit]!).toFixed(2))}${unit}`));
}

/** `$2.50` per hour; `-` when unknown. */
/** Dollars spent so far; `-` for nothing (a run still queued, a local instance). */
export function formatCost(dollars: number): string {
  return dollars === 0 ? '-' : formatDollars(dollars);
}

export function formatPrice(pricePerHour: number | null | undefined): string {
  return pricePerHour === null || pricePerHour === undefined ? '-' : formatDollars(pricePerHour);
}

/** `H100:80GB:2`; `-` for no GPU or unknown. */
export function formatGpuInfo(gpu: GpuInfo | null | undefined): string {
  return gpu ? formatGpu(gpu) : '-';
}

/** `12s ago`, `5m ago`, `3h ago`, `2d ago`. */
export function formatAge(timestamp: string, now = Date.now()): string {
  return `${roughSpan(now - Date.parse(timestamp))} ago`;
}

/** `12s`, `5m`, `1h 59m`, `2d 3h`: the time left until `timestamp`, to the minute above one minute. */
export function formatTimeLeft(timestamp: string, now = Date.now()): string {
  const minutes = Math.floor(Math.max(0, Date.parse(timestamp) - now) / 60_000);
  if (minutes < 60) return roughSpan(Date.parse(timestamp) - now);
  if (minutes < 1440) return `${Math.floor(minutes / 60)}h ${minutes % 60}m`;
  return `${Math.floor(minutes / 1440)}d ${Math.floor(minutes / 60) % 24}h`;
}

function roughSpan(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 60) return `${seconds}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h`;
  return `${Math.floor(seconds / 86400)}d`;
}

/** `2026-01-31 14:05:09` in local time. */
export function formatTime(timestamp: string): string {
  const date = new Date(timestamp);
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** `spot` for capacity the backend may interrupt, else `-`; tables show the column only when some offer is spot. */
export function formatSpot(offer: { spot?: boolean }): string {
  return offer.spot === true ? 'spot' : '-';
}
