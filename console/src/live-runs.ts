import type { LiveListVersions, LiveRunsChanges, LiveRunsSnapshot } from '../../api/live-runs.js';
import type { Run } from '../../api/objects.js';
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, call, projectPath } from './api.js';

export interface LiveRuns {
  /** Null until the stream's first answer; newest first. A run that did not change keeps the same object. */
  runs: Run[] | null;
  /** The most runs the stream holds: when `runs` has this many, older ones are left out. */
  limit: number;
  /** The versions of the project's other lists: a page reads its list again when its version changes. Null until sent. */
  lists: LiveListVersions | null;
  /** False while the stream is down and the browser reconnects. */
  connected: boolean;
  /** Why the server refused the stream (no such project, not a member); the stream is then closed. */
  refused: string | null;
}

/**
 * The version of one of the project's lists that a page reads its list by: null until the live stream sends the
 * versions (the page waits, rather than read once now and again when they come), and a mark of its own while the
 * stream is down or refused without them, so that the page reads its list anyway.
 */
export function listVersion(live: LiveRuns, list: keyof LiveListVersions): string | null {
  if (live.lists) return live.lists[list];
  return live.connected ? null : 'no live stream';
}

const newestFirst = (a: Run, b: Run) => (a.submittedAt === b.submittedAt ? (a.id < b.id ? 1 : -1) : a.submittedAt < b.submittedAt ? 1 : -1);

/**
 * The project's runs through the console's one live stream: the whole list first, then only the runs that changed
 * and the ids of those that left. Changes are applied once per animation frame, however many arrive in it.
 */
export function useLiveRuns(project: string): LiveRuns {
  const [state, setState] = useState<LiveRuns>({ runs: null, limit: 0, lists: null, connected: true, refused: null });
  useEffect(() => {
    setState({ runs: null, limit: 0, lists: null, connected: true, refused: null });
    const source = new EventSource(`${projectPath(project)}/live`);
    let byId = new Map<string, Run>();
    let limit = 0;
    let pending: LiveRunsChanges[] = [];
    let frame = 0;
    const publish = () => setState((previous) => ({ ...previous, runs: [...byId.values()].sort(newestFirst), limit, connected: true }));
    const applyPending = () => {
      frame = 0;
      for (const { upserts, removals } of pending) {
        for (const run of upserts) byId.set(run.id, run);
        for (const id of removals) byId.delete(id);
      }
      pending = [];
      publish();
    };
    source.addEventListener('snapshot', (event) => {
      const snapshot = JSON.parse((event as MessageEvent<string>).data) as LiveRunsSnapshot;
      byId = new Map(snapshot.runs.map((run) => [run.id, run]));
      limit = snapshot.limit;
      pending = [];
      publish();
    });
    source.addEventListener('changes', (event) => {
      pending.push(JSON.parse((event as MessageEvent<string>).data) as LiveRunsChanges);
      frame ||= requestAnimationFrame(applyPending);
    });
    source.addEventListener('lists', (event) => {
      const lists = JSON.parse((event as MessageEvent<string>).data) as LiveListVersions;
      setState((previous) => ({ ...previous, lists }));
    });
    source.onerror = () => {
      setState((previous) => ({ ...previous, connected: false }));
      // An EventSource cannot see the status: ask the same question plainly, rather than retry for ever a stream the
      // server refuses (a 401 there signs the console out).
      call('GET', `${projectPath(project)}/runs`).catch((failure) => {
        if (!(failure instanceof ApiFailure) || failure.status >= 500) return;
        source.close();
        setState({ runs: null, limit: 0, lists: null, connected: false, refused: failure.message });
      });
    };
    return () => {
      cancelAnimationFrame(frame);
      source.close();
    };
  }, [project]);
  return state;
}
