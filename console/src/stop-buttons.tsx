import type { Run } from '../../api/objects.js';
import { FINISHED_RUN_STATUSES } from '../../api/status.js';
import { useState } from 'preact/hooks';
import { call, projectPath } from './api.js';

type Action = 'stop' | 'abort';

/** Stop and abort for a run that has not ended; each asks first, in place, and says if the server refused. */
export function StopButtons({ run }: { run: Run }) {
  const [asking, setAsking] = useState<Action | null>(null);
  const [error, setError] = useState<string | null>(null);
  if (FINISHED_RUN_STATUSES.includes(run.status)) return null;
  const send = async (action: Action) => {
    setAsking(null);
    setError(null);
    try {
      await call('POST', `${projectPath(run.project)}/runs/${encodeURIComponent(run.name)}/stop`, { abort: action === 'abort' });
    } catch (failure) {
      setError((failure as Error).message);
    }
  };
  if (asking) {
    return (
      <span class="confirm" role="group" aria-label={`confirm ${asking}`}>
        <span>{asking === 'stop' ? `Stop ${run.name}?` : `Abort ${run.name} without waiting?`}</span>
        <button class="danger" onClick={() => void send(asking)}>{asking === 'stop' ? 'Yes, stop' : 'Yes, abort'}</button>
        <button onClick={() => setAsking(null)}>Cancel</button>
      </span>
    );
  }
  return (
    <span class="actions">
      <button onClick={() => setAsking('stop')} disabled={run.status === 'terminating'}>Stop</button>
      <button onClick={() => setAsking('abort')}>Abort</button>
      {error && <span class="error" role="alert">{error}</span>}
    </span>
  );
}
