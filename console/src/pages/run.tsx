import { ideLink, ideOf } from '../../../api/ide.js';
import { parsePortMapping } from '../../../api/mappings.js';
import type { Event, Run } from '../../../api/objects.js';
import { FINISHED_RUN_STATUSES } from '../../../api/status.js';
import { useEffect, useState } from 'preact/hooks';
import { ApiFailure, call, projectPath } from '../api.js';
import { Age, costText, gpuText, priceText, useNow } from '../format.js';
import type { LiveRuns } from '../live-runs.js';
import { LogView } from '../log-view.js';
import { RunMetricsCharts, ServiceCharts } from '../run-charts.js';
import { Link } from '../navigation.js';
import { StopButtons } from '../stop-buttons.js';
import { StatusText } from './runs.js';

/** One run: its status (live), its history of events, its logs as they come, and how to reach it. */
export function RunPage({ project, name, live }: { project: string; name: string; live: LiveRuns }) {
  const now = useNow();
  const [fetched, setFetched] = useState<Run | null>(null);
  const [missing, setMissing] = useState<string | null>(null);
  const [events, setEvents] = useState<Event[]>([]);
  const run = live.runs?.find((candidate) => candidate.name === name) ?? fetched;
  const runPath = `${projectPath(project)}/runs/${encodeURIComponent(name)}`;

  useEffect(() => {
    setFetched(null);
    setMissing(null);
    call<Run>('GET', runPath).then(setFetched, (failure) => setMissing(failure instanceof ApiFailure ? failure.message : String(failure)));
  }, [runPath]);
  useEffect(() => {
    call<Event[]>('GET', `${projectPath(project)}/events?object=${encodeURIComponent(name)}`).then(setEvents, () => undefined);
  }, [project, name, run?.status, run?.statusMessage]);

  if (!run) {
    return missing ? <p class="empty">{missing}. <Link to={`/projects/${encodeURIComponent(project)}/runs`}>Back to the runs</Link></p> : <p class="muted">Loading…</p>;
  }
  return (
    <section class="run">
      <div class="toolbar">
        <h2>{run.name}</h2>
        <StopButtons run={run} />
      </div>
      <dl class="facts">
        <dt>Status</dt><dd><StatusText run={run} /></dd>
        <dt>Kind</dt><dd>{run.kind}</dd>
        <dt>User</dt><dd>{run.user}</dd>
        <dt>Fleet</dt><dd>{run.fleet ?? '—'}</dd>
        <dt>Instance</dt><dd>{run.instance ?? '—'}</dd>
        <dt>GPU</dt><dd>{gpuText(run.gpu)}</dd>
        <dt>Price</dt><dd>{priceText(run.pricePerHour)}</dd>
        <dt>Cost so far</dt><dd class="cost">{costText(run.cost)}</dd>
        <dt>Submitted</dt><dd><Age at={run.submittedAt} now={now} /></dd>
        {run.exitCode !== null && <><dt>Exit code</dt><dd>{run.exitCode}</dd></>}
        {run.attempt > 1 && <><dt>Attempt</dt><dd>{run.attempt}</dd></>}
      </dl>
      <Connect run={run} />
      {run.service && <ServicePanel run={run} service={run.service} />}
      {run.service && <ServiceCharts project={project} run={run} />}
      <RunMetricsCharts project={project} run={run} />
      <LogView project={project} run={run} />
      <h3>History</h3>
      {events.length === 0 ? <p class="muted">No events yet.</p> : (
        <table class="events">
          <thead><tr><th>When</th><th>Reason</th><th>Message</th></tr></thead>
          <tbody>{events.map((event) => (
            <tr key={event.id}><td><Age at={event.createdAt} now={now} /></td><td>{event.reason}</td><td>{event.message}</td></tr>
          ))}</tbody>
        </table>
      )}
    </section>
  );
}

/** How to reach the run from one's own machine: the ssh command, a dev environment's IDE link, the ports `attach` forwards. */
function Connect({ run }: { run: Run }) {
  if (FINISHED_RUN_STATUSES.includes(run.status)) return null;
  const ide = ideOf(run);
  const folder = typeof run.spec.working_dir === 'string' && run.spec.working_dir.startsWith('/') ? run.spec.working_dir : '';
  const ports = Array.isArray(run.spec.ports) ? (run.spec.ports as (number | string)[]) : [];
  return (
    <div class="connect">
      <h3>Connect</h3>
      {run.ssh ? <pre>orchestrator ssh {run.name}</pre>
        : <p class="muted">SSH opens once the run is running: <code>orchestrator ssh {run.name}</code></p>}
      {ide && run.ssh && (
        <p>Open in {ide.name}: <a class="ide-link" href={ideLink(ide, run.name, folder)}>{ideLink(ide, run.name, folder)}</a>
          <span class="muted"> (needs the run's SSH entry on this machine: <code>orchestrator attach {run.name}</code> writes it{folder ? '' : ', and prints the link with the working folder'})</span></p>
      )}
      {ports.length > 0 && (
        <div class="ports">
          <p><code>orchestrator attach {run.name}</code> forwards its ports to this machine:</p>
          <table>
            <thead><tr><th>Local port</th><th>Run's port</th></tr></thead>
            <tbody>{ports.map((entry) => {
              const { local, container } = parsePortMapping(entry);
              return <tr key={String(entry)}><td>{local === null ? 'any free port' : <code>localhost:{local}</code>}</td><td>{container}</td></tr>;
            })}</tbody>
          </table>
        </div>
      )}
    </div>
  );
}

function ServicePanel({ run, service }: { run: Run; service: NonNullable<Run['service']> }) {
  const urls = [`${location.origin}${service.path}`, service.modelPath && `${location.origin}${service.modelPath}`, service.gatewayUrl, service.gatewayModelUrl]
    .filter((url): url is string => !!url);
  return (
    <div class="service">
      <h3>Service</h3>
      <ul class="urls">{urls.map((url) => <li key={url}><code>{url}</code></li>)}</ul>
      {service.model && <p>Model <code>{service.model}</code></p>}
      <table>
        <thead><tr><th>Replica</th><th>State</th><th>Generation</th><th>Instance</th><th>Message</th></tr></thead>
        <tbody>{service.replicas.map((replica) => (
          <tr key={replica.replica}><td>{run.name}-{replica.replica}</td><td class="replica-state">{replica.state}</td><td>{replica.generation}</td><td>{replica.instance ?? '—'}</td><td>{replica.statusMessage}</td></tr>
        ))}</tbody>
      </table>
      <p class="muted">{service.replicas.length} of {service.desiredReplicas} desired replicas</p>
    </div>
  );
}
