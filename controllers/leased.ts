import type { Logger } from 'winston';
import type { Db, Row } from '../store/db.js';
import { concerns, type RunInterest } from '../store/channels.js';
import { claimDue, heldRowsMadeDue, nextDueInMs, readHeldLeases, releaseLease, releaseLeases, type LeasedTable } from '../store/leases.js';
import { BatchedCalls } from './batched-calls.js';
import { HeldRows } from './held-rows.js';
import type { Controller } from './manager.js';

export interface LeasedOptions {
  table: LeasedTable;
  channel: string;
  /** SQL condition on the table's rows that this controller looks after. */
  where: string;
  /** Rows reconciled at once; a pass claims more only as earlier ones finish. */
  concurrency?: number;
  leaseMs?: number;
  /**
   * Rows falling due within this long are claimed with those due now: a reconcile a little early changes nothing
   * (reconciles are level-triggered), and rows that fall due one after another then cost one claim, not one each.
   */
  claimAheadMs?: number;
  /** Which NOTIFYs on `runs` wake it (store/channels.ts#runChange); without this, every one on its channel does. */
  hears?: RunInterest;
  /**
   * Rows that `holds` keeps stay leased to this server between reconciles and are read again when due, not claimed
   * again and given back: a look then writes nothing to its row but a renewal of the lease now and then.
   */
  holding?: boolean;
  /** The columns of its rows that its claims and reads of held rows return (a SELECT list); all of them by default. */
  columns?: string;
  /**
   * With `holding`: the columns a held row is read again with (a SELECT list with `generation`), those that change while
   * it is held; the rest stay as its claim read them. A row whose generation moved is given back, to be claimed whole.
   */
  heldColumns?: string;
}

/** What a reconcile returns when it gave the row's lease back itself, having handed the row to another loop. */
export const LEASE_GIVEN_BACK = 'given back';

const ERROR_RETRY_MS = 5000;
/** The longest wait before a lease that could not be given back is given back again. */
const RELEASE_RETRY_MAX_MS = 1000;
const DEFAULT_CONCURRENCY = 64;
/** Held rows falling due within this long are looked at with a row of their group (`group`) that is due now. */
const HELD_SIBLINGS_AHEAD_MS = 1000;
/** The longest a pass keeps claiming while rows keep falling due. */
const PASS_SLICE_MS = 1000;
const DEFAULT_LEASE_MS = 60_000;

/**
 * A controller over one table: claims due rows under a lease, reconciles each one outside any
 * transaction, then gives the lease back with the delay the reconcile asked for.
 *
 * A pass does not wait for the rows it started: each reconcile finishes on its own and wakes the
 * loop when its row falls due again, so one slow row (an agent that does not answer, a job that
 * prints without pause) holds one slot, never the whole pass.
 */
export abstract class LeasedController<T> implements Controller {
  abstract readonly name: string;
  readonly channel: string;
  private readonly inFlight = new Map<string, Promise<void>>();
  /** Rows claimed again while their reconcile still ran, waiting for it to end (adoptWhenDone). */
  private readonly waiting = new Set<Promise<void>>();
  private wakeLoop: () => void = () => {};
  private wakeTimer: NodeJS.Timeout | null = null;
  private wakeAt = Number.POSITIVE_INFINITY;
  /**
   * Leases given back by reconciles that end meanwhile go back in one statement; each call says whether its row went
   * back (or is no longer ours), false when another transaction held it locked and it is to be given back again.
   */
  private readonly releases = new BatchedCalls<{ id: string; nextInMs: number }, boolean>(async (releases) => {
    if (releases.length === 1) {
      await releaseLease(this.db, this.options.table, releases[0]!.id, this.owner, releases[0]!.nextInMs);
      return [true];
    }
    const skipped = new Set(await releaseLeases(this.db, this.options.table, this.owner, releases));
    return releases.map((release) => !skipped.has(release.id));
  }, (release) => release.id);
  /** Rows kept leased between reconciles (`holding`): each as last read and when it is due again. */
  private readonly held = new HeldRows();
  /** Until when this server's lease of each row it holds runs, as it last claimed or renewed it (`holding`). */
  private readonly leasedUntil = new Map<string, number>();
  /** Rows made due (`lookSoon`) while their reconcile ran: they are due at once when it ends. */
  private readonly dueOnReturn = new Set<string>();
  /** When the earliest row nobody held fell due, as last read; rows change under it only with a NOTIFY or by our releases. */
  private nextDueAt = Number.NEGATIVE_INFINITY;

  constructor(
    protected readonly db: Db,
    readonly owner: string,
    protected readonly logger: Logger,
    protected readonly options: LeasedOptions,
  ) {
    this.channel = options.channel;
  }

  protected abstract toRecord(row: Row): T;
  /** Moves the world one safe step toward the record; returns milliseconds until it wants another look. */
  protected abstract reconcile(record: T): Promise<number | typeof LEASE_GIVEN_BACK>;

  /** With `holding`: whether the row, its reconcile done and wanted again in `nextInMs`, stays leased to this server. */
  protected holds(_record: T, _nextInMs: number): boolean {
    return false;
  }

  hears(payload: string): boolean {
    return this.options.hears === undefined || concerns(payload, this.options.hears);
  }

  setWake(wake: () => void): void {
    this.wakeLoop = wake;
  }

  async pass(nudged: () => boolean = () => false, heard = true): Promise<number | void> {
    const limit = this.options.concurrency ?? DEFAULT_CONCURRENCY;
    const started = Date.now();
    await this.lookAgainAtHeld(limit, heard);
    for (;;) {
      while (this.inFlight.size >= limit) await Promise.race(this.inFlight.values());
      const room = limit - this.inFlight.size;
      const claimedAt = Date.now();
      const rows = await this.claim(room);
      if (this.options.holding) for (const row of rows) this.leasedUntil.set(row.id as string, claimedAt + this.leaseMs);
      this.adopt(rows);
      if (rows.length < room) break;
      // More rows fall due than the loop gets through: it passes again at once, but the manager gets to stop it first.
      if (Date.now() - started >= PASS_SLICE_MS) return 0;
    }
    if (nudged()) return undefined;
    // A pass that nothing was heard before (the loop's interval, a release of ours falling due) need not ask again while
    // the row last read is still ahead: our releases wake the loop themselves (wakeIn), and others' changes NOTIFY.
    if (heard || this.nextDueAt <= Date.now()) {
      const dueInMs = await nextDueInMs(this.db, this.options.table, this.options.where);
      this.nextDueAt = dueInMs === null ? Number.POSITIVE_INFINITY : Date.now() + dueInMs;
    }
    const nextAt = Math.min(this.nextDueAt, this.held.earliestDueAt());
    return Number.isFinite(nextAt) ? Math.max(0, nextAt - Date.now()) : undefined;
  }

  /** How long a claim holds a row; whoever leases a row for this controller (`adopt`) holds it as long. */
  get leaseMs(): number {
    return this.options.leaseMs ?? DEFAULT_LEASE_MS;
  }

  /**
   * Starts reconciling rows this server holds the lease of, as a claim's rows: those of its own claim, and those another
   * loop leased to it in the write that made them due (the scheduler's placement), which then need no claim.
   */
  adopt(rows: Row[]): void {
    const busy = rows.filter((row) => this.inFlight.has(row.id));
    for (const group of this.group(rows.filter((row) => !this.inFlight.has(row.id)))) {
      const done = this.reconcileRows(group);
      for (const row of group) this.inFlight.set(row.id, done.finally(() => this.inFlight.delete(row.id)));
    }
    this.adoptWhenDone(busy);
  }

  /**
   * A row can be claimed again between its last reconcile giving the lease back and that reconcile leaving
   * `inFlight` (a claim ahead takes rows due within the next second). Dropping it would leave it leased to this server
   * until the lease ran out; it is reconciled once the earlier reconcile has ended instead.
   */
  private adoptWhenDone(rows: Row[]): void {
    if (rows.length === 0) return;
    const later = Promise.allSettled(rows.map((row) => this.inFlight.get(row.id))).then(() => this.adopt(rows));
    this.waiting.add(later);
    void later.finally(() => this.waiting.delete(later));
  }

  /**
   * Reconciles again the held rows that are due, read again in one statement (their leases renewed where they run out
   * within half a lease); a row that no longer matches `where` is given back, one whose lease was lost is forgotten.
   * After a NOTIFY, a held row someone made due (a stop request) is due at once.
   */
  private async lookAgainAtHeld(limit: number, heard: boolean): Promise<void> {
    if (this.held.size === 0 || this.inFlight.size >= limit) return;
    const madeDue = new Set(heard ? await heldRowsMadeDue(this.db, this.options.table, this.owner, this.options.where) : []);
    for (const id of madeDue) this.held.makeDue(id);
    const now = Date.now();
    // As many as a claim would take now, the most overdue first; the rest at the next pass.
    const taken = this.held.takeDue(now + (this.options.claimAheadMs ?? 0), now + HELD_SIBLINGS_AHEAD_MS, limit - this.inFlight.size);
    if (taken.length === 0) return;
    const ids = taken.map((held) => held.row.id as string);
    // A row made due is renewed too, which makes it due again when its lease runs out.
    const renew = ids.filter((id) => madeDue.has(id) || (this.leasedUntil.get(id) ?? 0) - now < this.leaseMs / 2);
    let rows;
    try {
      rows = await readHeldLeases(this.db, this.options.table, this.owner, ids, renew, this.leaseMs, this.options.where, this.options.heldColumns ?? this.options.columns);
    } catch (error) {
      for (const held of taken) this.held.set(held.row, held.dueAt, this.groupKey(held.row));
      throw error;
    }
    for (const id of renew) this.leasedUntil.set(id, now + this.leaseMs);
    const read = new Set(rows.map((row) => row.id as string));
    for (const id of ids) if (!read.has(id)) this.leasedUntil.delete(id);
    const before = new Map(taken.map((held) => [held.row.id as string, held.row]));
    // The claimed row takes the columns read again in place: a copy of each row (spread, with `still_held` left out) was
    // a twentieth of the server's thread at 10 000 runs (bench/README.md, "Where the server's thread goes at 10 000 runs").
    const whole: Row[] = [];
    for (const row of rows) {
      if (!row.still_held) continue;
      if (this.options.heldColumns === undefined) {
        whole.push(row);
        continue;
      }
      const claimed = before.get(row.id as string)!;
      if (claimed.generation === row.generation) whole.push(Object.assign(claimed, row));
    }
    const kept = new Set(whole.map((row) => row.id as string));
    const ended = rows.filter((row) => !kept.has(row.id as string)).map((row) => ({ id: row.id as string, nextInMs: 0 }));
    for (const { id } of ended) this.leasedUntil.delete(id);
    this.adopt(whole);
    await Promise.all(ended.map((release) => this.giveBack(release)));
  }

  /**
   * Waits for the reconciles still running, so their leases are given back before the server stops; the leases of held
   * rows go back with all of this server's (manager.ts).
   */
  async settle(): Promise<void> {
    while (this.inFlight.size > 0 || this.waiting.size > 0) await Promise.all([...this.inFlight.values(), ...this.waiting]);
    this.held.clear();
    this.leasedUntil.clear();
    this.dueOnReturn.clear();
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    this.wakeTimer = null;
  }

  /**
   * Makes rows this server holds due now, and the loop pass: something outside the table told that they changed. A
   * row whose reconcile is running is due again as soon as that one ends.
   */
  protected lookSoon(ids: string[]): void {
    for (const id of ids) {
      if (this.held.makeDue(id)) continue;
      if (this.inFlight.has(id)) this.dueOnReturn.add(id);
    }
    this.wakeLoop();
  }

  /** Claims up to `limit` due rows; a controller that looks at rows together claims them so (run-watch.ts). */
  protected claim(limit: number): Promise<Row[]> {
    return claimDue(this.db, this.options.table, this.owner, this.leaseMs, limit, this.options.where, this.options.claimAheadMs, this.options.holding, this.options.columns);
  }

  /** The group a row is reconciled in (`reconcileGroup`): each row alone unless a controller looks at rows together. */
  protected groupKey(row: Row): string {
    return row.id as string;
  }

  /** The claimed rows in the groups that `reconcileGroup` takes, by `groupKey`. */
  private group(rows: Row[]): Row[][] {
    const groups = new Map<string, Row[]>();
    for (const row of rows) {
      const key = this.groupKey(row);
      const group = groups.get(key);
      if (group) group.push(row);
      else groups.set(key, [row]);
    }
    return [...groups.values()];
  }

  /** Reconciles a group of rows, each to its own delay; by default each on its own. */
  protected reconcileGroup(records: T[]): Array<Promise<number | typeof LEASE_GIVEN_BACK>> {
    return records.map((record) => this.reconcile(record));
  }

  /**
   * Reconciles a group, then gives its leases back, each with the delay its reconcile asked for (except those a
   * reconcile gave back itself), in one statement with those of the other groups that end meanwhile.
   */
  private async reconcileRows(rows: Row[]): Promise<void> {
    const records = rows.map((row) => this.toRecord(row));
    const outcomes = await Promise.allSettled(this.reconcileGroup(records));
    const next = rows.flatMap((row, index) => {
      const outcome = outcomes[index]!;
      const id = row.id as string;
      const madeDue = this.dueOnReturn.delete(id);
      if (outcome.status === 'rejected') {
        this.logger.warn(`${this.name} ${row.name ?? row.id}: ${(outcome.reason as Error).message}`);
        return [{ row, id, nextInMs: ERROR_RETRY_MS, keep: false }];
      }
      if (outcome.value === LEASE_GIVEN_BACK) return [];
      const nextInMs = madeDue ? 0 : outcome.value;
      return [{ row, id, nextInMs, keep: this.options.holding === true && this.holds(records[index]!, nextInMs) }];
    });
    if (next.length === 0) return;
    const now = Date.now();
    for (const { row, nextInMs } of next.filter(({ keep }) => keep)) this.held.set(row, now + nextInMs, this.groupKey(row));
    const releases = next.filter(({ keep }) => !keep).map(({ id, nextInMs }) => ({ id, nextInMs }));
    for (const { id } of releases) this.leasedUntil.delete(id);
    await Promise.all(releases.map((release) => this.giveBack(release)));
    this.wakeIn(Math.min(...next.map((release) => release.nextInMs)));
  }

  /**
   * Gives a lease back, again until it went: a row left leased to this server after its reconcile would wait out its
   * lease (15 s for a running run) before anyone looked at it again. A try fails as a deadlock's victim on PostgreSQL
   * (its rows locked in one order, a scheduler's in another). Its delay counts from the first try.
   */
  private async giveBack(release: { id: string; nextInMs: number }): Promise<void> {
    const started = Date.now();
    for (let tries = 1; ; tries++) {
      try {
        if (await this.releases.call({ id: release.id, nextInMs: Math.max(0, release.nextInMs - (Date.now() - started)) })) return;
      } catch (error) {
        if (Date.now() - started >= this.leaseMs) {
          // A rejection here would reach no handler and stop the server; the lease runs out instead.
          this.logger.warn(`${this.name}: giving back the lease of ${release.id} failed for ${this.leaseMs} ms, it runs out instead: ${(error as Error).message}`);
          return;
        }
        this.logger.warn(`${this.name}: giving back the lease of ${release.id} failed (${(error as Error).message}); trying again`);
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(RELEASE_RETRY_MAX_MS, 10 * 2 ** tries)));
    }
  }

  /** Makes the loop pass again when a released row falls due; one timer for the earliest. */
  private wakeIn(ms: number): void {
    const at = Date.now() + Math.max(0, ms);
    if (at >= this.wakeAt) return;
    if (this.wakeTimer) clearTimeout(this.wakeTimer);
    this.wakeAt = at;
    this.wakeTimer = setTimeout(() => {
      this.wakeTimer = null;
      this.wakeAt = Number.POSITIVE_INFINITY;
      this.wakeLoop();
    }, Math.max(0, ms));
    this.wakeTimer.unref();
  }
}
