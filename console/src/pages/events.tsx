import { useEffect, useState } from 'preact/hooks';
import { EventObjectKind, type Event } from '../../../api/objects.js';
import { projectPath } from '../api.js';
import { Age, useNow } from '../format.js';
import { Link } from '../navigation.js';
import { setQueryFilters } from '../query-filters.js';
import { listVersion, type LiveRuns } from '../live-runs.js';
import { useApi } from '../use-api.js';
import { runPath } from './runs.js';

const KINDS = EventObjectKind.anyOf.map((literal) => literal.const);
const WINDOWS: { value: string; label: string; seconds: number }[] = [
  { value: '15m', label: 'last 15 minutes', seconds: 900 },
  { value: '1h', label: 'last hour', seconds: 3600 },
  { value: '1d', label: 'last day', seconds: 86_400 },
  { value: '7d', label: 'last week', seconds: 604_800 },
];
const SHOWN = 500;

/**
 * The project's events, newest first, filtered by kind of object, object and time window (all in the URL), read again
 * when the live stream says a new one was recorded.
 */
export function EventsPage({ project, query, live }: { project: string; query: URLSearchParams; live: LiveRuns }) {
  const now = useNow(10_000);
  const kind = query.get('kind') ?? '';
  const object = query.get('object') ?? '';
  const within = query.get('within') ?? '';
  const [objectText, setObjectText] = useState(object);
  useEffect(() => setObjectText(object), [object]);
  const seconds = WINDOWS.find((w) => w.value === within)?.seconds;
  // The window's start moves with the clock, a minute at a time, so that the path (and the read) stays put meanwhile.
  const since = seconds ? new Date(Math.floor((now - seconds * 1000) / 60_000) * 60_000).toISOString() : '';
  const search = new URLSearchParams({ limit: String(SHOWN) });
  if (kind) search.set('kind', kind);
  if (object) search.set('object', object);
  if (since) search.set('since', since);
  const { data: events, error } = useApi<Event[]>(`${projectPath(project)}/events?${search}`, undefined, listVersion(live, 'events'));
  const filtered = kind || object || within;
  return (
    <section>
      <div class="toolbar">
        <h2>Events</h2>
        <label>Kind <select value={kind} onChange={(event) => setQueryFilters({ kind: (event.target as HTMLSelectElement).value })}>
          <option value="">any</option>
          {KINDS.map((value) => <option value={value}>{value}</option>)}
        </select></label>
        <form class="inline" onSubmit={(event) => {
          event.preventDefault();
          // The field as it stands, not the state of the last drawing, which an Enter pressed at once may precede.
          setQueryFilters({ object: ((event.currentTarget as HTMLFormElement).elements.namedItem('object') as HTMLInputElement).value.trim() });
        }}>
          <label>Object <input type="search" name="object" placeholder="run, fleet or instance name" value={objectText}
            onInput={(event) => setObjectText((event.target as HTMLInputElement).value)}
            onChange={(event) => setQueryFilters({ object: (event.target as HTMLInputElement).value.trim() })} /></label>
        </form>
        <label>Time <select value={within} onChange={(event) => setQueryFilters({ within: (event.target as HTMLSelectElement).value })}>
          <option value="">any time</option>
          {WINDOWS.map((w) => <option value={w.value}>{w.label}</option>)}
        </select></label>
      </div>
      {error && <p class="error" role="alert">{error}</p>}
      {events === null ? <p class="muted">Loading events…</p>
        : events.length === 0 ? (
          filtered ? <p class="empty">No events match these filters. <Link to={location.pathname}>Show all events</Link>.</p> : (
            <div class="empty">
              <p>Nothing has happened in this project yet.</p>
              <p>Applying a fleet or a run records what becomes of it here: <code>orchestrator apply -f examples/fleets/local.yml</code></p>
            </div>
          )
        ) : (
          <table class="events">
            <thead><tr><th>Time</th><th>Kind</th><th>Object</th><th>Reason</th><th>Message</th></tr></thead>
            <tbody>{[...events].reverse().map((e) => (
              <tr key={e.id}>
                <td><Age at={e.createdAt} now={now} /></td>
                <td>{e.objectKind}</td>
                <td>{e.objectKind === 'run' ? <Link to={runPath(project, e.objectName)}>{e.objectName}</Link> : e.objectName}</td>
                <td>{e.reason}</td>
                <td class="message">{e.message}</td>
              </tr>
            ))}</tbody>
          </table>
        )}
      {events && events.length === SHOWN && <p class="muted">The newest {SHOWN} are shown; narrow the filters to see older ones.</p>}
    </section>
  );
}
