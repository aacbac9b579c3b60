import type { Logger } from 'winston';
import type { Db } from '../store/db.js';
import { CHANNELS } from '../store/channels.js';
import { listRunViews } from '../store/run-views.js';

/** The console's runs list holds this many runs, newest first, finished ones included. */
const LIVE_RUNS_LIMIT = 500;
/** Not every status change sends a NOTIFY (an agent's answer does not), so the list is read again this often too. */
const REREAD_MS = 1000;
/** NOTIFYs that come in a burst are read as one. */
const NUDGE_DEBOUNCE_MS = 50;

type Subscriber = (runs: string) => void;

interface Feed {
  subscribers: Set<Subscriber>;
  /** The list as last read (JSON), '' before the first read. */
  last: string;
  reading: boolean;
  again: boolean;
  reread: NodeJS.Timeout;
  nudge?: NodeJS.Timeout;
  unlistens: Array<Promise<() => Promise<void>>>;
}

/**
 * One reader of each project's runs list for every console tab that follows it: the list is read once per change
 * (a NOTIFY, or the periodic read finding it changed) and handed to every tab, however many are open.
 */
export class LiveRuns {
  private readonly feeds = new Map<string, Feed>();

  constructor(private readonly db: Db, private readonly logger: Logger) {}

  /** `send` gets the list (JSON) at once and whenever it changes; the function returned ends that. */
  subscribe(projectId: string, send: Subscriber): () => void {
    const feed = this.feeds.get(projectId) ?? this.open(projectId);
    feed.subscribers.add(send);
    if (feed.last) send(feed.last);
    else void this.read(projectId, feed);
    return () => {
      feed.subscribers.delete(send);
      if (feed.subscribers.size === 0) this.close(projectId, feed);
    };
  }

  private open(projectId: string): Feed {
    const feed: Feed = {
      subscribers: new Set(), last: '', reading: false, again: false, unlistens: [],
      reread: setInterval(() => void this.read(projectId, feed), REREAD_MS),
    };
    const nudged = () => {
      clearTimeout(feed.nudge);
      feed.nudge = setTimeout(() => void this.read(projectId, feed), NUDGE_DEBOUNCE_MS);
    };
    feed.unlistens = [CHANNELS.runs, CHANNELS.instances].map((channel) => this.db.listen(channel, nudged));
    this.feeds.set(projectId, feed);
    return feed;
  }

  private close(projectId: string, feed: Feed): void {
    clearInterval(feed.reread);
    clearTimeout(feed.nudge);
    for (const unlisten of feed.unlistens) void unlisten.then((stop) => stop()).catch(() => undefined);
    this.feeds.delete(projectId);
  }

  private async read(projectId: string, feed: Feed): Promise<void> {
    if (feed.reading) { feed.again = true; return; }
    feed.reading = true;
    try {
      do {
        feed.again = false;
        const runs = JSON.stringify(await listRunViews(this.db, projectId, true, LIVE_RUNS_LIMIT));
        if (runs !== feed.last) {
          feed.last = runs;
          for (const send of feed.subscribers) send(runs);
        }
      } while (feed.again);
    } catch (error) {
      this.logger.warn(`console live stream of project ${projectId}: ${(error as Error).message}`);
    } finally {
      feed.reading = false;
    }
  }
}
