import { AsyncLocalStorage } from 'node:async_hooks';

const background = new AsyncLocalStorage<true>();

/**
 * Runs work that nobody waits on (the controllers' loops): on a database of one connection its statements queue behind
 * those of requests, so that a busy controller does not make `ps` wait for its whole queue.
 */
export function inBackground<T>(fn: () => T): T {
  return background.run(true, fn);
}

/** Lets one statement (or transaction) through at a time; those of requests go before those of background work. */
export class PriorityGate {
  private busy = false;
  private readonly waiting = { foreground: [] as Array<() => void>, background: [] as Array<() => void> };

  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.busy) await new Promise<void>((enter) => this.waiting[background.getStore() ? 'background' : 'foreground'].push(enter));
    else this.busy = true;
    try {
      return await work();
    } finally {
      const next = this.waiting.foreground.shift() ?? this.waiting.background.shift();
      if (next) next();
      else this.busy = false;
    }
  }
}
