import type { Run } from '../../../api/objects.js';
import { RunStatus } from '../../../api/status.js';
import { Age, costText, gpuText, priceText, useNow } from '../format.js';
import type { LiveRuns } from '../live-runs.js';
import { Link, navigate } from '../navigation.js';
import { setQueryFilter } from '../query-filters.js';
import { StopButtons } from '../stop-buttons.js';

const KINDS = ['task', 'service', 'dev-environment'];
const STATUSES = RunStatus.anyOf.map((literal) => literal.const as string);

export function runPath(project: string, name: string): string {
  return `/projects/${encodeURIComponent(project)}/runs/${encodeURIComponent(name)}`;
}

/** The status cell: the status, where it waits in the queue, and why. */
export function StatusText({ run }: { run: Run }) {
  return (
    <span class="status-cell">
      <span class={`status status-${run.status}`}>{run.status}</span>
      {run.queuePosition !== null && <span class="queue"> #{run.queuePosition} in queue</span>}
      {run.statusMessage && <span class="reason">{run.statusMessage}</span>}
    </span>
  );
}

/** The project's runs, live, filtered by status, kind and user (kept in the URL, so that a filtered list can be shared). */
export function RunsPage({ project, live, query }: { project: string; live: LiveRuns; query: URLSearchParams }) {
  const now = useNow();
  const status = query.get('status') ?? '';
  const kind = query.get('kind') ?? '';
  const setFilter = (name: string, value: string) => setQueryFilter(query, name, value);
  const user = query.get('user') ?? '';
  const users = [...new Set((live.runs ?? []).map((run) => run.user))].sort();
  const shown = (live.runs ?? []).filter((run) => (!status || run.status === status) && (!kind || run.kind === kind) && (!user || run.user === user));
  return (
    <section>
      <div class="toolbar">
        <h2>Runs</h2>
        <label>Status <select value={status} onChange={(event) => setFilter('status', (event.target as HTMLSelectElement).value)}>
          <option value="">any</option>
          {STATUSES.map((value) => <option value={value}>{value}</option>)}
        </select></label>
        <label>Kind <select value={kind} onChange={(event) => setFilter('kind', (event.target as HTMLSelectElement).value)}>
          <option value="">any</option>
          {KINDS.map((value) => <option value={value}>{value}</option>)}
        </select></label>
        <label>User <select value={user} onChange={(event) => setFilter('user', (event.target as HTMLSelectElement).value)}>
          <option value="">any</option>
          {(user && !users.includes(user) ? [...users, user] : users).map((value) => <option value={value}>{value}</option>)}
        </select></label>
        <span class={live.connected ? 'live' : 'live offline'}>{live.connected ? 'live' : 'reconnecting…'}</span>
      </div>
      {live.runs === null ? <p class="muted">Loading runs…</p>
        : live.runs.length === 0 ? <EmptyRuns />
          : shown.length === 0 ? <p class="empty">No runs match these filters. <a href={location.pathname} onClick={(event) => { event.preventDefault(); navigate(location.pathname, true); }}>Show all runs</a>.</p>
            : (
              <table class="runs">
                <thead><tr><th>Name</th><th>Status</th><th>Kind</th><th>Fleet</th><th>GPU</th><th>Price</th><th>Cost</th><th>Age</th><th>User</th><th></th></tr></thead>
                <tbody>
                  {shown.map((run) => (
                    <tr key={run.id} data-run={run.name}>
                      <td><Link to={runPath(project, run.name)}>{run.name}</Link></td>
                      <td><StatusText run={run} /></td>
                      <td>{run.kind}</td>
                      <td>{run.fleet ?? '—'}</td>
                      <td>{gpuText(run.gpu)}</td>
                      <td class="number">{priceText(run.pricePerHour)}</td>
                      <td class="number cost">{costText(run.cost)}</td>
                      <td><Age at={run.submittedAt} now={now} /></td>
                      <td>{run.user}</td>
                      <td><StopButtons run={run} /></td>
                    </tr>
                  ))}
                </tbody>
              </table>
            )}
    </section>
  );
}

function EmptyRuns() {
  return (
    <div class="empty">
      <p>No runs in this project yet.</p>
      <p>Submit one from a terminal, and it appears here at once:</p>
      <pre>orchestrator apply -f examples/tasks/hello.yml</pre>
      <p>A run lands on one of the project's fleets; if it has none yet, see the Fleets page.</p>
    </div>
  );
}
