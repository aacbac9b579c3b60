import type { Db } from './db.js';

/** A statement's way through the gate: requests' (`false`) or background work's (`true`). */
export type GatedRun = <T>(work: () => Promise<T>) => Promise<T>;

/**
 * A database's handle for requests and, as its `background`, the handle for work that nobody waits on (the controllers'
 * loops), over one gate: `make` builds a handle whose statements go through the gate as `run` lets them. Which handle a
 * statement came through says its priority. (An AsyncLocalStorage said it before, and made Node run hooks at every
 * promise of the process: bench/README.md, "Background work told by its handle".)
 */
export function gatedHandles(gate: PriorityGate, make: (run: GatedRun) => Omit<Db, 'background'>): Db {
  const background: Db = { ...make((work) => gate.run(work, true)), get background() { return background; } };
  return { ...make((work) => gate.run(work, false)), background };
}

/** How long background statements may follow one another before the event loop gets a turn. */
const BACKGROUND_SLICE_MS = 20;

/**
 * Lets `capacity` statements (or transactions) through at once, those of requests before those of background work,
 * and background work never more than `backgroundCapacity` at once: the rest of the connections stay free for
 * requests, so that one never waits for a controller's statement to end. A driver that pipelines statements onto busy
 * connections (postgres.js) then gets no more than it has connections, so a request's statement is not queued behind
 * a controller's on one of them.
 */
export class PriorityGate {
  private inUse = 0;
  private backgroundInUse = 0;
  private backgroundTurnScheduled = false;
  /** When the loop last turned for background work (or started): see admit(). */
  private sliceStartedAt = performance.now();
  private readonly waiting = { foreground: [] as Array<() => void>, background: [] as Array<() => void> };

  constructor(private readonly capacity = 1, private readonly backgroundCapacity = capacity) {}

  async run<T>(work: () => Promise<T>, inBackgroundWork = false): Promise<T> {
    if (this.mayEnter(inBackgroundWork) && (!inBackgroundWork || this.waiting.background.length === 0)) this.enter(inBackgroundWork);
    // Background work waits its turn behind background work already waiting; admit() enters a waiter before it wakes it.
    else await new Promise<void>((enter) => this.waiting[inBackgroundWork ? 'background' : 'foreground'].push(enter));
    try {
      return await work();
    } finally {
      this.inUse -= 1;
      if (inBackgroundWork) this.backgroundInUse -= 1;
      this.admit();
    }
  }

  private mayEnter(inBackgroundWork: boolean): boolean {
    return this.inUse < this.capacity && (!inBackgroundWork || this.backgroundInUse < this.backgroundCapacity);
  }

  private enter(inBackgroundWork: boolean): void {
    this.inUse += 1;
    if (inBackgroundWork) this.backgroundInUse += 1;
  }

  /**
   * Lets waiting requests in while there is room, then background work. Statements that need no I/O (PGlite's, run in
   * this thread) follow one another in promise callbacks without the event loop turning: 2 000 of them held it for
   * 1–2 s, in which no request's bytes were read and no timer ran. So background work that has run for a slice of
   * time waits for the next turn of the loop.
   */
  private admit(): void {
    this.admitRequests();
    if (this.waiting.background.length === 0 || this.backgroundTurnScheduled) return;
    if (performance.now() - this.sliceStartedAt < BACKGROUND_SLICE_MS) {
      this.admitBackground();
      return;
    }
    this.backgroundTurnScheduled = true;
    setImmediate(() => {
      this.backgroundTurnScheduled = false;
      this.sliceStartedAt = performance.now();
      this.admitRequests();
      this.admitBackground();
    });
  }

  private admitRequests(): void {
    while (this.waiting.foreground.length > 0 && this.mayEnter(false)) {
      this.enter(false);
      this.waiting.foreground.shift()!();
    }
  }

  private admitBackground(): void {
    while (this.waiting.background.length > 0 && this.mayEnter(true)) {
      this.enter(true);
      this.waiting.background.shift()!();
    }
  }
}
