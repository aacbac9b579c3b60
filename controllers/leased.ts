import type { Logger } from 'winston';
import type { Db, Row } from '../store/db.js';
import { claimDue, releaseLease, type LeasedTable } from '../store/leases.js';
import type { Controller } from './manager.js';

export interface LeasedOptions {
  table: LeasedTable;
  channel: string;
  /** SQL condition on the table's rows that this controller looks after. */
  where: string;
  batch?: number;
  concurrency?: number;
  leaseMs?: number;
}

const ERROR_RETRY_MS = 5000;

/**
 * A controller over one table: claims due rows under a lease, reconciles each one outside any
 * transaction, then gives the lease back with the delay the reconcile asked for.
 */
export abstract class LeasedController<T> implements Controller {
  abstract readonly name: string;
  readonly channel: string;

  constructor(
    protected readonly db: Db,
    protected readonly owner: string,
    protected readonly logger: Logger,
    private readonly options: LeasedOptions,
  ) {
    this.channel = options.channel;
  }

  protected abstract toRecord(row: Row): T;
  /** Moves the world one safe step toward the record; returns milliseconds until it wants another look. */
  protected abstract reconcile(record: T): Promise<number>;

  async pass(): Promise<number | void> {
    const batch = this.options.batch ?? 200;
    for (;;) {
      const rows = await claimDue(this.db, this.options.table, this.owner, this.options.leaseMs ?? 60_000, batch, this.options.where);
      await forEachConcurrently(rows, this.options.concurrency ?? 32, (row) => this.reconcileRow(row));
      if (rows.length < batch) break;
    }
    const [next] = await this.db.query<{ ms: number | null }>(
      `SELECT (EXTRACT(EPOCH FROM min(next_reconcile_at) - now()) * 1000)::float8 AS ms FROM ${this.options.table}
       WHERE lease_owner IS NULL AND (${this.options.where})`);
    return next?.ms ?? undefined;
  }

  private async reconcileRow(row: Row): Promise<void> {
    let nextInMs: number;
    try {
      nextInMs = await this.reconcile(this.toRecord(row));
    } catch (error) {
      this.logger.warn(`${this.name} ${row.name ?? row.id}: ${(error as Error).message}`);
      nextInMs = ERROR_RETRY_MS;
    }
    await releaseLease(this.db, this.options.table, row.id, this.owner, nextInMs);
  }
}

export async function forEachConcurrently<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length) await fn(items[next++]);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
