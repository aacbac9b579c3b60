import type { Context } from 'koa';
import { badRequest } from './http-errors.js';

/** Sequence numbers and event ids are 4-byte integers in the database; any cursor past the largest finds nothing. */
const LARGEST_CURSOR = 2 ** 31 - 1;

/**
 * A cursor from the query string (`after=N`): a whole number of 0 or more, 0 when absent. One past
 * anything the database can hold is clamped, since nothing can come after it anyway.
 */
export function cursorQuery(ctx: Context, name: string): number {
  const raw = ctx.query[name];
  if (raw === undefined) return 0;
  if (typeof raw !== 'string' || !/^\d{1,20}$/.test(raw)) throw badRequest(`${name}: expected a whole number of 0 or more`);
  return Math.min(Number(raw), LARGEST_CURSOR);
}

/**
 * Cursors of a multi-node task's nodes: `after=N` for every node, or `after=N0,N1,...`, one per node in rank order
 * (ranks past the list start at 0). Gives each rank's cursor.
 */
export function nodeCursorsQuery(ctx: Context, name: string): (rank: number) => number {
  const raw = ctx.query[name];
  if (typeof raw === 'string' && raw.includes(',')) {
    if (!/^\d{1,20}(,\d{1,20})*$/.test(raw)) throw badRequest(`${name}: expected a whole number of 0 or more, or one per node separated by commas`);
    const cursors = raw.split(',').map((seq) => Math.min(Number(seq), LARGEST_CURSOR));
    return (rank) => cursors[rank] ?? 0;
  }
  const after = cursorQuery(ctx, name);
  return () => after;
}

/** A time from the query string (`since=2026-01-01T10:00:00Z`): an ISO 8601 date and time; undefined when absent. */
export function timeQuery(ctx: Context, name: string): Date | undefined {
  const raw = ctx.query[name];
  if (raw === undefined) return undefined;
  const time = typeof raw === 'string' && /^\d{4}-\d{2}-\d{2}T/.test(raw) ? new Date(raw) : null;
  if (!time || Number.isNaN(time.getTime())) throw badRequest(`${name}: expected a date and time such as 2026-01-31T09:30:00Z`);
  return time;
}

/** How many items to answer (`limit=N`): 1 to `max`; undefined when absent. */
export function limitQuery(ctx: Context, max: number): number | undefined {
  const raw = ctx.query.limit;
  if (raw === undefined) return undefined;
  if (typeof raw !== 'string' || !/^\d{1,7}$/.test(raw) || Number(raw) < 1 || Number(raw) > max) throw badRequest(`limit: expected a whole number from 1 to ${max}`);
  return Number(raw);
}
