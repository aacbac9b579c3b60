import type { Gateway } from '../../../api/gateways.js';
import { projectPath } from '../api.js';
import { Age, useNow } from '../format.js';
import { listVersion, type LiveRuns } from '../live-runs.js';
import { useApi } from '../use-api.js';

/** When a certificate runs out, relative (`in 89d`), with the exact time on hover. */
function Expiry({ at, now }: { at: string; now: number }) {
  const days = Math.floor((Date.parse(at) - now) / 86_400_000);
  const text = days < 0 ? 'expired' : days === 0 ? 'expires today' : `expires in ${days}d`;
  return <time dateTime={at} title={new Date(at).toString()} class={days < 14 ? 'status-failed' : ''}>{text}</time>;
}

/**
 * The project's gateways: domain, where they listen, their state, and each certificate's expiry or why it failed; read
 * again when the live stream says one changed.
 */
export function GatewaysPage({ project, live }: { project: string; live: LiveRuns }) {
  const now = useNow(60_000);
  const { data: gateways, error } = useApi<Gateway[]>(`${projectPath(project)}/gateways`, undefined, listVersion(live, 'gateways'));
  return (
    <section>
      <div class="toolbar"><h2>Gateways</h2></div>
      {error && <p class="error" role="alert">{error}</p>}
      {gateways === null ? <p class="muted">Loading gateways…</p> : gateways.length === 0 ? (
        <div class="empty">
          <p>No gateways in this project. Services are reached through the server's own proxy until one is applied.</p>
          <p>A gateway serves them on a domain of yours, with certificates; apply one from the Apply page or a terminal:</p>
          <pre>{'type: gateway\nname: edge\ndomain: example.com\nbackend: local'}</pre>
        </div>
      ) : (
        <table class="gateways">
          <thead><tr><th>Name</th><th>Domain</th><th>Status</th><th>Address</th><th>Backend</th><th>Certificates</th><th>Last seen</th></tr></thead>
          <tbody>{gateways.map((gateway) => (
            <tr key={gateway.id} data-gateway={gateway.name}>
              <td>{gateway.name}</td>
              <td>{gateway.domain}{gateway.default && <span class="muted"> (default)</span>}</td>
              <td><span class={`status status-${gateway.status}`}>{gateway.status}</span>{gateway.statusMessage && <span class="reason">{gateway.statusMessage}</span>}</td>
              <td>{gateway.address ? <code>{gateway.address}</code> : <span class="muted">not listening yet</span>}</td>
              <td>{gateway.backend}</td>
              <td>{gateway.certificates.length === 0 ? <span class="muted">none yet: one is requested per service host</span> : (
                <ul class="certificates">{gateway.certificates.map((certificate) => (
                  <li key={certificate.hostname}>
                    <span>{certificate.hostname}</span>{' '}
                    <span class={`status status-${certificate.state === 'valid' ? 'running' : certificate.state}`}>{certificate.state}</span>{' '}
                    {certificate.notAfter && <Expiry at={certificate.notAfter} now={now} />}
                    {certificate.error && <span class="reason">{certificate.error}</span>}
                  </li>
                ))}</ul>
              )}</td>
              <td><Age at={gateway.lastSeenAt} now={now} /></td>
            </tr>
          ))}</tbody>
        </table>
      )}
    </section>
  );
}
