import type { Fleet } from '../../../api/objects.js';
import { useEffect, useState } from 'preact/hooks';
import { call, projectPath } from '../api.js';
import { Age, gpuText, priceText, useNow } from '../format.js';

/** Fleets change seldom: the page reads them again this often, one request for the whole page. */
const REFRESH_MS = 3000;

/** The project's fleets, each with its instances: state, backend, GPU, price, idle since, and the run on it. */
export function FleetsPage({ project }: { project: string }) {
  const now = useNow();
  const [fleets, setFleets] = useState<Fleet[] | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    setFleets(null);
    const read = () => call<Fleet[]>('GET', `${projectPath(project)}/fleets`).then((answer) => { setFleets(answer); setError(null); }, (failure) => setError((failure as Error).message));
    void read();
    const timer = setInterval(() => void read(), REFRESH_MS);
    return () => clearInterval(timer);
  }, [project]);
  return (
    <section>
      <div class="toolbar"><h2>Fleets</h2></div>
      {error && <p class="error" role="alert">{error}</p>}
      {fleets === null ? <p class="muted">Loading fleets…</p> : fleets.length === 0 ? (
        <div class="empty">
          <p>No fleets in this project. Runs need a fleet to land on; create one from a terminal:</p>
          <pre>orchestrator apply -f examples/fleets/local.yml</pre>
        </div>
      ) : fleets.map((fleet) => (
        <div class="fleet" key={fleet.id} data-fleet={fleet.name}>
          <h3>{fleet.name} <span class={`status status-${fleet.status}`}>{fleet.status}</span></h3>
          {fleet.statusMessage && <p class="reason">{fleet.statusMessage}</p>}
          {fleet.instances.length === 0 ? <p class="muted">No instances: the fleet provisions them as runs need them.</p> : (
            <table>
              <thead><tr><th>Instance</th><th>Status</th><th>Backend</th><th>GPU</th><th>Region</th><th>Price</th><th>Idle since</th><th>Run</th></tr></thead>
              <tbody>{fleet.instances.map((instance) => (
                <tr key={instance.id}>
                  <td>{instance.name}</td>
                  <td><span class={`status status-${instance.status}`}>{instance.status}</span>{instance.statusMessage && <span class="reason">{instance.statusMessage}</span>}</td>
                  <td>{instance.backend}</td>
                  <td>{gpuText(instance.gpu)}</td>
                  <td>{instance.region ?? '—'}</td>
                  <td class="number">{priceText(instance.pricePerHour)}</td>
                  <td><Age at={instance.idleSince} now={now} /></td>
                  <td>{instance.run ?? '—'}</td>
                </tr>
              ))}</tbody>
            </table>
          )}
        </div>
      ))}
    </section>
  );
}
