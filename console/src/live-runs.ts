import type { Run } from '../../api/objects.js';
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, call, projectPath } from './api.js';

export interface LiveRuns {
  /** Null until the stream's first answer. */
  runs: Run[] | null;
  /** False while the stream is down and the browser reconnects. */
  connected: boolean;
  /** Why the server refused the stream (no such project, not a member); the stream is then closed. */
  refused: string | null;
}

/** The project's runs through the console's one live stream: the whole list, sent again whenever it changes. */
export function useLiveRuns(project: string): LiveRuns {
  const [state, setState] = useState<LiveRuns>({ runs: null, connected: true, refused: null });
  useEffect(() => {
    setState({ runs: null, connected: true, refused: null });
    const source = new EventSource(`${projectPath(project)}/live`);
    source.addEventListener('runs', (event) => setState({ runs: JSON.parse((event as MessageEvent<string>).data) as Run[], connected: true, refused: null }));
    source.onerror = () => {
      setState((previous) => ({ ...previous, connected: false }));
      // An EventSource cannot see the status: ask the same question plainly, rather than retry for ever a stream the
      // server refuses (a 401 there signs the console out).
      call('GET', `${projectPath(project)}/runs`).catch((failure) => {
        if (!(failure instanceof ApiFailure) || failure.status >= 500) return;
        source.close();
        setState({ runs: null, connected: false, refused: failure.message });
      });
    };
    return () => source.close();
  }, [project]);
  return state;
}
