import type { Logger } from 'winston';
import type { Db } from '../store/db.js';
import { eventsAfter, lastEventId, type LoggedEvent } from '../store/events.js';

const POLL_MS = 1000;
const PAGE = 500;
/**
 * Event ids are handed out when a transaction inserts, so a lower id can commit after a higher one: a gap
 * is waited for this long before it counts as rolled back.
 */
const GAP_WAIT_MS = 10_000;

/**
 * Writes every event, of every project, to the server's log as it is recorded: runs submitted, started and
 * ended, instances created and terminated, failures. Events that other servers on the same database record
 * are written too: each terminal tells the whole story.
 */
export class EventLog {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | null = null;
  /** Every id up to this one has been written or given up on. */
  private after = 0;
  private readonly written = new Set<number>();

  constructor(private readonly db: Db, private readonly logger: Logger) {}

  async start(): Promise<void> {
    this.after = await lastEventId(this.db);
    this.timer = setInterval(() => {
      this.running ??= this.poll().catch((error: Error) => {
        this.logger.warn(`reading events for the log failed: ${error.message}`);
      }).finally(() => { this.running = null; });
    }, POLL_MS);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }

  private async poll(): Promise<void> {
    const events = await eventsAfter(this.db, this.after, PAGE);
    for (const event of events) {
      if (this.written.has(event.id)) continue;
      this.logger.info(eventLine(event));
      this.written.add(event.id);
    }
    const settled = Date.now() - GAP_WAIT_MS;
    for (const event of events) {
      const contiguous = event.id === this.after + 1;
      if (!contiguous && event.createdAt.getTime() > settled) break;
      this.after = event.id;
      this.written.delete(event.id);
    }
  }
}

/** `run hello (main): Running: ...`. */
function eventLine(event: LoggedEvent): string {
  return `${event.objectKind} ${event.objectName} (${event.project}): ${event.reason}: ${event.message}`;
}
