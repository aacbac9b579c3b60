import type { Logger } from 'winston';
import type { Db } from '../store/db.js';
import { CHANNELS } from '../store/channels.js';
import { listVersions } from '../store/list-versions.js';
import { runViewsOf, runViewVersions } from '../store/run-views.js';

/** The console's runs list holds this many runs, newest first, finished ones included. */
const LIVE_RUNS_LIMIT = 5000;
/** Not every status change sends a NOTIFY (an agent's answer does not), so the versions are read again this often too. */
const REREAD_MS = 1000;
/** NOTIFYs that come in a burst are read as one. */
const NUDGE_DEBOUNCE_MS = 50;

/**
 * What a tab is sent (api/live-runs.ts): `snapshot`, the whole list, first; then `changes`, the runs whose views
 * changed and the ids of those that left; and `lists`, the versions of the project's other lists, first and on a change.
 */
export type LiveRunsMessage = { event: 'snapshot' | 'changes' | 'lists'; data: string };
type Subscriber = (message: LiveRunsMessage) => void;

/** A listed run as last read: the version its view was read at, and the view (JSON). */
interface Held {
  version: string;
  view: string;
}

interface Feed {
  subscribers: Set<Subscriber>;
  /** The list as last read, newest first; null before the first read. */
  runs: Map<string, Held> | null;
  /** The other lists' versions as last read (JSON), '' before the first read. */
  lists: string;
  /** A gateway changed, which no version shows: read every view again. */
  readAll: boolean;
  reading: boolean;
  again: boolean;
  reread: NodeJS.Timeout;
  nudge?: NodeJS.Timeout;
  unlistens: Array<Promise<() => Promise<void>>>;
}

const snapshotOf = (runs: Map<string, Held>): LiveRunsMessage => ({
  event: 'snapshot', data: `{"limit":${LIVE_RUNS_LIMIT},"runs":[${[...runs.values()].map((held) => held.view).join(',')}]}`,
});

/**
 * One reader of each project's runs list for every console tab that follows it. On each change (a NOTIFY, or the
 * periodic read of the versions finding one) it reads the views of the runs whose versions changed, and hands every
 * tab those that look different and the ids of those that left the list, however many tabs are open. It reads the
 * versions of the project's other lists (events, fleets, gateways) as often, so that their pages read them again
 * when they change rather than on a timer of their own.
 */
export class LiveRuns {
  private readonly feeds = new Map<string, Feed>();

  constructor(private readonly db: Db, private readonly logger: Logger) {}

  /** `send` gets the list at once and its changes as they come; the function returned ends that. */
  subscribe(projectId: string, send: Subscriber): () => void {
    const feed = this.feeds.get(projectId) ?? this.open(projectId);
    feed.subscribers.add(send);
    if (feed.runs) {
      send(snapshotOf(feed.runs));
      if (feed.lists) send({ event: 'lists', data: feed.lists });
    } else void this.read(projectId, feed);
    return () => {
      feed.subscribers.delete(send);
      if (feed.subscribers.size === 0) this.close(projectId, feed);
    };
  }

  private open(projectId: string): Feed {
    const feed: Feed = {
      subscribers: new Set(), runs: null, lists: '', readAll: false, reading: false, again: false, unlistens: [],
      reread: setInterval(() => void this.read(projectId, feed), REREAD_MS),
    };
    const nudged = () => {
      clearTimeout(feed.nudge);
      feed.nudge = setTimeout(() => void this.read(projectId, feed), NUDGE_DEBOUNCE_MS);
    };
    feed.unlistens = [
      ...[CHANNELS.runs, CHANNELS.instances, CHANNELS.fleets].map((channel) => this.db.listen(channel, nudged)),
      this.db.listen(CHANNELS.gateways, () => { feed.readAll = true; nudged(); }),
    ];
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
        await this.readChanges(projectId, feed);
        await this.readLists(projectId, feed);
      } while (feed.again);
    } catch (error) {
      this.logger.warn(`console live stream of project ${projectId}: ${(error as Error).message}`);
    } finally {
      feed.reading = false;
    }
  }

  private async readChanges(projectId: string, feed: Feed): Promise<void> {
    const readAll = feed.readAll;
    feed.readAll = false;
    const before = feed.runs ?? new Map<string, Held>();
    const versions = await runViewVersions(this.db, projectId, LIVE_RUNS_LIMIT);
    const stale = versions.filter(({ id, version }) => readAll || before.get(id)?.version !== version).map(({ id }) => id);
    const views = new Map((await runViewsOf(this.db, stale)).map((run) => [run.id, JSON.stringify(run)]));
    const runs = new Map<string, Held>();
    const changed: string[] = [];
    for (const { id, version } of versions) {
      const view = views.get(id) ?? before.get(id)?.view;
      if (view === undefined) continue;
      runs.set(id, { version, view });
      if (view !== before.get(id)?.view) changed.push(view);
    }
    const removed = [...before.keys()].filter((id) => !runs.has(id));
    const first = feed.runs === null;
    feed.runs = runs;
    if (!first && changed.length === 0 && removed.length === 0) return;
    const message = first ? snapshotOf(runs) : { event: 'changes' as const, data: `{"upserts":[${changed.join(',')}],"removals":${JSON.stringify(removed)}}` };
    for (const send of feed.subscribers) send(message);
  }

  private async readLists(projectId: string, feed: Feed): Promise<void> {
    const lists = JSON.stringify(await listVersions(this.db, projectId));
    if (lists === feed.lists) return;
    feed.lists = lists;
    for (const send of feed.subscribers) send({ event: 'lists', data: lists });
  }
}
