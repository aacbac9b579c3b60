import type { Logger } from 'winston';
import type { Db } from '../store/db.js';
import { releaseAllLeases } from '../store/leases.js';

/** One reconciler: a pass over whatever is due, woken on a fixed interval and by NOTIFY on its channel. */
export interface Controller {
  readonly name: string;
  readonly channel: string;
  /** Whether a NOTIFY on its channel with this payload may concern it; without this, every one does. */
  hears?(payload: string): boolean;
  /**
   * Returns how soon, in milliseconds, something it looks after falls due again (when it knows). `nudged` says whether
   * a nudge came since the pass began: then another pass follows at once, and that answer is not needed. `heard` says
   * whether a NOTIFY on its channel (or the start) came since the last pass began: when not, no other server has said
   * that its rows changed, and what the controller learnt of them then still holds.
   */
  pass(nudged?: () => boolean, heard?: boolean): Promise<number | void>;
  /** Receives a function that makes the controller's loop pass again soon (work it started finished). */
  setWake?(wake: () => void): void;
  /** Resolves once work a pass started but did not wait for has ended. */
  settle?(): Promise<void>;
}

interface Loop {
  controller: Controller;
  wake: () => void;
  nudged: boolean;
  heard: boolean;
  done: Promise<void>;
  failures: number;
}

const MAX_BACKOFF_MS = 30_000;

export class ControllerManager {
  private running = false;
  private loops: Loop[] = [];
  private unlisteners: Array<() => Promise<void>> = [];

  constructor(
    private readonly db: Db,
    private readonly owner: string,
    private readonly controllers: Controller[],
    private readonly logger: Logger,
    private readonly intervalMs = 1000,
  ) {}

  async start(): Promise<void> {
    this.running = true;
    for (const controller of this.controllers) {
      const loop: Loop = { controller, wake: () => {}, nudged: false, heard: true, done: Promise.resolve(), failures: 0 };
      this.loops.push(loop);
      controller.setWake?.(() => this.wake(loop));
      loop.done = this.run(loop);
    }
    for (const channel of new Set(this.controllers.map((c) => c.channel))) {
      this.unlisteners.push(await this.db.listen(channel, (payload) => this.nudge(channel, payload)));
    }
  }

  /**
   * Wakes every controller on the channel that the payload may concern, now; a nudge during a pass makes another pass
   * follow at once. A controller the payload does not concern still passes on its interval.
   */
  private nudge(channel: string, payload: string): void {
    for (const loop of this.loops) {
      if (loop.controller.channel === channel && (loop.controller.hears?.(payload) ?? true)) {
        loop.heard = true;
        this.wake(loop);
      }
    }
  }

  private wake(loop: Loop): void {
    loop.nudged = true;
    loop.wake();
  }

  async stop(): Promise<void> {
    this.running = false;
    for (const unlisten of this.unlisteners) await unlisten().catch(() => {});
    for (const loop of this.loops) loop.wake();
    await Promise.all(this.loops.map((l) => l.done));
    await Promise.all(this.controllers.map((c) => c.settle?.()));
    await releaseAllLeases(this.db, this.owner);
  }

  private async run(loop: Loop): Promise<void> {
    while (this.running) {
      loop.nudged = false;
      const heard = loop.heard;
      loop.heard = false;
      let dueInMs: number | void = undefined;
      try {
        dueInMs = await loop.controller.pass(() => loop.nudged, heard);
        loop.failures = 0;
      } catch (error) {
        loop.failures += 1;
        loop.heard = true;
        this.logger.error(`${loop.controller.name} controller pass failed: ${(error as Error).stack ?? error}`);
      }
      if (!this.running) break;
      if (loop.nudged && loop.failures === 0) continue;
      const delay = loop.failures > 0
        ? Math.min(MAX_BACKOFF_MS, this.intervalMs * 2 ** loop.failures)
        : Math.max(0, Math.min(this.intervalMs, dueInMs ?? this.intervalMs));
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delay);
        loop.wake = () => { clearTimeout(timer); resolve(); };
      });
      loop.wake = () => {};
    }
  }
}
