import type { Fleet, Instance, Run } from '../../../api/objects.js';
import { parseDurationOrOff, formatDuration } from '../../../api/duration.js';
import { fleetNodes } from '../../../api/fleet-rules.js';
import { DEFAULT_IDLE_DURATION, type FleetSpec } from '../../../api/spec.js';
import { FINISHED_RUN_STATUSES } from '../../../api/status.js';
import { call, projectPath } from '../api.js';
import { ConfirmButton } from '../confirm-button.js';
import { Age, costText, gpuText, priceText, relativeTime, useNow } from '../format.js';
import { listVersion, type LiveRuns } from '../live-runs.js';
import { Link } from '../navigation.js';
import { useApi } from '../use-api.js';
import { runPath } from './runs.js';

/** Runs that have not ended and use the instance: as their job, one of their nodes, or one of their replicas. */
function runsOn(instance: Instance, runs: Run[]): string[] {
  const names = new Set(instance.run ? [instance.run] : []);
  for (const run of runs) {
    if (FINISHED_RUN_STATUSES.includes(run.status)) continue;
    const places = [run.instance, ...(run.nodes ?? []).map((node) => node.instance), ...(run.service?.replicas ?? []).map((replica) => replica.instance)];
    if (places.includes(instance.name)) names.add(run.name);
  }
  return [...names];
}

/** The fleet's idle_duration in seconds (null: off), and the fewest instances it keeps whatever their idleness. */
function idleRule(fleet: Fleet): { idleSeconds: number | null; nodesMin: number } {
  const spec = fleet.spec as Pick<FleetSpec, 'idle_duration' | 'nodes'>;
  try {
    return {
      idleSeconds: parseDurationOrOff(spec.idle_duration ?? DEFAULT_IDLE_DURATION),
      nodesMin: fleetNodes(spec.nodes ?? 0).min,
    };
  } catch {
    return { idleSeconds: null, nodesMin: 0 };
  }
}

/** How long an idle instance has been idle, and when the fleet lets it go: only while it has more than its minimum. */
function IdleTimer({ instance, fleet, now }: { instance: Instance; fleet: Fleet; now: number }) {
  if (!instance.idleSince) return <span class="muted">—</span>;
  const { idleSeconds, nodesMin } = idleRule(fleet);
  const left = idleSeconds === null ? null : Math.max(0, Math.round(idleSeconds - (now - Date.parse(instance.idleSince)) / 1000));
  const fate = idleSeconds === null ? 'kept: idle_duration is off'
    : fleet.instances.length <= nodesMin ? `kept: the fleet keeps at least ${nodesMin}`
      : left === 0 ? 'being released' : `released in ${formatDuration(left!)}`;
  return (
    <span class="idle" title={`idle since ${new Date(instance.idleSince).toString()}`}>
      idle for {relativeTime(instance.idleSince, now).replace(' ago', '')}
      <span class="reason">{fate}</span>
    </span>
  );
}

/**
 * The project's fleets, each with its instances: state, backend, GPU, price, idle timer and the runs on it; a fleet can
 * be deleted. Read again when the live stream says a fleet, an instance or their cost changed.
 */
export function FleetsPage({ project, live }: { project: string; live: LiveRuns }) {
  const now = useNow();
  const { data: fleets, error, reload } = useApi<Fleet[]>(`${projectPath(project)}/fleets`, undefined, listVersion(live, 'fleets'));
  return (
    <section>
      <div class="toolbar"><h2>Fleets</h2></div>
      {error && <p class="error" role="alert">{error}</p>}
      {fleets === null ? <p class="muted">Loading fleets…</p> : fleets.length === 0 ? (
        <div class="empty">
          <p>No fleets in this project. Runs need a fleet to land on; create one on the Apply page or from a terminal:</p>
          <pre>orchestrator apply -f examples/fleets/local.yml</pre>
        </div>
      ) : fleets.map((fleet) => (
        <div class="fleet" key={fleet.id} data-fleet={fleet.name}>
          <div class="toolbar">
            <h3>{fleet.name} <span class={`status status-${fleet.status}`}>{fleet.status}</span> <span class="muted">generation {fleet.generation}</span></h3>
            {fleet.status !== 'terminating' && (
              <ConfirmButton label="Delete fleet" yes="Yes, delete"
                question={`Delete fleet ${fleet.name}? Its ${fleet.instances.length === 1 ? 'instance is' : `${fleet.instances.length} instances are`} released, and runs on them stop.`}
                act={async () => { await call('DELETE', `${projectPath(project)}/fleets/${encodeURIComponent(fleet.name)}`); reload(); }} />
            )}
          </div>
          {fleet.statusMessage && <p class="reason">{fleet.statusMessage}</p>}
          {fleet.instances.length === 0 ? <p class="muted">No instances: the fleet provisions them as runs need them.</p> : (
            <table class="instances">
              <thead><tr><th>Instance</th><th>Status</th><th>Backend</th><th>GPU</th><th>Region</th><th>Price</th><th>Cost</th><th>Idle</th><th>Runs</th><th>Created</th></tr></thead>
              <tbody>{fleet.instances.map((instance) => {
                const runs = runsOn(instance, live.runs ?? []);
                return (
                  <tr key={instance.id} data-instance={instance.name}>
                    <td>{instance.name}</td>
                    <td><span class={`status status-${instance.status}`}>{instance.status}</span>{instance.statusMessage && <span class="reason">{instance.statusMessage}</span>}</td>
                    <td>{instance.backend}</td>
                    <td>{gpuText(instance.gpu)}</td>
                    <td>{instance.region ?? '—'}</td>
                    <td class="number">{priceText(instance.pricePerHour)}</td>
                    <td class="number cost">{costText(instance.cost)}</td>
                    <td class="idle-cell"><IdleTimer instance={instance} fleet={fleet} now={now} /></td>
                    <td class="runs-cell">{runs.length === 0 ? <span class="muted">none</span> : runs.map((name) => <div key={name}><Link to={runPath(project, name)}>{name}</Link></div>)}</td>
                    <td><Age at={instance.createdAt} now={now} /></td>
                  </tr>
                );
              })}</tbody>
            </table>
          )}
        </div>
      ))}
    </section>
  );
}
