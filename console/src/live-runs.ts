import type { Run } from '../../api/objects.js';
import { useEffect, useState } from 'preact/hooks';
import { currentSession, projectPath, reportSignedOut } from './api.js';

export interface LiveRuns {
  /** Null until the stream's first answer. */
  runs: Run[] | null;
  /** False while the stream is down and the browser reconnects. */
  connected: boolean;
}

/** The project's runs through the console's one live stream: the whole list, sent again whenever it changes. */
export function useLiveRuns(project: string): LiveRuns {
  const [state, setState] = useState<LiveRuns>({ runs: null, connected: true });
  useEffect(() => {
    setState({ runs: null, connected: true });
    const source = new EventSource(`${projectPath(project)}/live`);
    source.addEventListener('runs', (event) => setState({ runs: JSON.parse((event as MessageEvent<string>).data) as Run[], connected: true }));
    source.onerror = () => {
      setState((previous) => ({ ...previous, connected: false }));
      // An EventSource cannot see the status: ask whether the session is the reason, rather than retry for ever.
      void currentSession().then((session) => {
        if (!session) {
          source.close();
          reportSignedOut();
        }
      }, () => undefined);
    };
    return () => source.close();
  }, [project]);
  return state;
}
