import type { Run } from '../../../api/objects.js';
import { RunStatus } from '../../../api/status.js';
import { memo } from 'preact/compat';
import { useLayoutEffect, useRef, useState } from 'preact/hooks';
import { Age, costText, gpuText, priceText, useNow } from '../format.js';
import type { LiveRuns } from '../live-runs.js';
import { Link, navigate } from '../navigation.js';
import { setQueryFilters } from '../query-filters.js';
import { StopButtons } from '../stop-buttons.js';
import { useWindowRows } from '../virtual-rows.js';

const KINDS = ['task', 'service', 'dev-environment'];
const STATUSES = RunStatus.anyOf.map((literal) => literal.const as string);
/** Every row is this high (the reason is cut to one line, whole on hover), so that the virtualiser measures nothing. */
const ROW_PX = 52;

export function runPath(project: string, name: string): string {
  return `/projects/${encodeURIComponent(project)}/runs/${encodeURIComponent(name)}`;
}

/** The status cell: the status, where it waits in the queue, and why. */
export function StatusText({ run }: { run: Run }) {
  return (
    <span class="status-cell">
      <span class={`status status-${run.status}`}>{run.status}</span>
      {run.queuePosition !== null && <span class="queue"> #{run.queuePosition} in queue</span>}
      {run.statusMessage && <span class="reason" title={run.statusMessage}>{run.statusMessage}</span>}
    </span>
  );
}

/** The project's runs, live, filtered by status, kind and user (kept in the URL, so that a filtered list can be shared). */
export function RunsPage({ project, live, query }: { project: string; live: LiveRuns; query: URLSearchParams }) {
  const now = useNow();
  const status = query.get('status') ?? '';
  const kind = query.get('kind') ?? '';
  const setFilter = (name: string, value: string) => setQueryFilters({ [name]: value });
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
        {live.runs !== null && <span class="muted run-count">{shown.length === live.runs.length ? `${shown.length.toLocaleString('en-US')} runs` : `${shown.length.toLocaleString('en-US')} of ${live.runs.length.toLocaleString('en-US')} runs`}</span>}
        <span class={live.connected ? 'live' : 'live offline'}>{live.connected ? 'live' : 'reconnecting…'}</span>
      </div>
      {live.runs === null ? <p class="muted">Loading runs…</p>
        : live.runs.length === 0 ? <EmptyRuns />
          : shown.length === 0 ? <p class="empty">No runs match these filters. <a href={location.pathname} onClick={(event) => { event.preventDefault(); navigate(location.pathname, true); }}>Show all runs</a>.</p>
            : <RunsTable project={project} runs={shown} now={now} />}
      {live.runs !== null && live.runs.length >= live.limit && (
        <p class="muted">The newest {live.limit.toLocaleString('en-US')} runs are listed; older ones are left out here (a run's page still opens by its name).</p>
      )}
    </section>
  );
}

/**
 * The runs, only those in view in the DOM (the page scrolls through all of them). Each row is keyed by the run's id
 * and drawn again only when its run changed (the live stream keeps an unchanged run's object) or the clock ticked.
 */
function RunsTable({ project, runs, now }: { project: string; runs: Run[]; now: number }) {
  const body = useRef<HTMLTableSectionElement>(null);
  const [top, setTop] = useState(0);
  useLayoutEffect(() => {
    const measured = body.current!.getBoundingClientRect().top + window.scrollY;
    if (measured !== top) setTop(measured);
  });
  const rows = useWindowRows({ count: runs.length, estimateSize: () => ROW_PX, overscan: 10, scrollMargin: top });
  const items = rows.getVirtualItems();
  const above = (items[0]?.start ?? top) - top;
  const below = rows.getTotalSize() - ((items.at(-1)?.end ?? top) - top);
  return (
    <table class="runs" data-count={runs.length}>
      <colgroup>
        <col class="col-name" /><col class="col-status" /><col class="col-kind" /><col class="col-fleet" /><col class="col-gpu" />
        <col class="col-price" /><col class="col-cost" /><col class="col-age" /><col class="col-user" /><col class="col-actions" />
      </colgroup>
      <thead><tr><th>Name</th><th>Status</th><th>Kind</th><th>Fleet</th><th>GPU</th><th>Price</th><th>Cost</th><th>Age</th><th>User</th><th></th></tr></thead>
      <tbody ref={body}>
        {above > 0 && <tr class="spacer" aria-hidden="true"><td colSpan={10} style={{ height: `${above}px` }} /></tr>}
        {items.map((item) => <RunRow key={runs[item.index]!.id} project={project} run={runs[item.index]!} now={now} />)}
        {below > 0 && <tr class="spacer" aria-hidden="true"><td colSpan={10} style={{ height: `${below}px` }} /></tr>}
      </tbody>
    </table>
  );
}

const RunRow = memo(function RunRow({ project, run, now }: { project: string; run: Run; now: number }) {
  return (
    <tr data-run={run.name}>
      <td title={run.name}><Link to={runPath(project, run.name)}>{run.name}</Link></td>
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
  );
});

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
