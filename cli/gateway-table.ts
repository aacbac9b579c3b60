import type { Gateway, GatewayCertificate } from '../api/gateways.js';
import { formatPrice, formatTime } from './format.js';
import { renderTable } from './table.js';

function certificateText(certificate: GatewayCertificate): string {
  if (certificate.state === 'failed') return `${certificate.hostname}: failed, served over HTTP: ${certificate.error}`;
  if (certificate.state === 'pending') return `${certificate.hostname}: being issued`;
  return `${certificate.hostname}: valid until ${formatTime(certificate.notAfter!)}`;
}

/** Where the gateway listens; for a rented instance, which one and its price. */
function addressText(gateway: Gateway): string {
  const { instance } = gateway;
  const address = gateway.address ?? '-';
  return instance ? `${address} on ${instance.id ?? 'a new instance'} (${instance.offer}, ${formatPrice(instance.pricePerHour)}/h)` : address;
}

/** One row per gateway, then one per certificate under it (none for a gateway without certificates). */
export function renderGateways(gateways: readonly Gateway[]): string {
  const rows = gateways.flatMap((gateway) => {
    const certificates = gateway.certificates.map(certificateText);
    const type = (gateway.spec.certificate as { type?: string } | undefined)?.type ?? 'lets-encrypt';
    const status = gateway.statusMessage ? `${gateway.status}: ${gateway.statusMessage}` : gateway.status;
    return [
      [gateway.name, gateway.domain, gateway.default ? 'yes' : '', addressText(gateway), status,
        certificates[0] ?? (type === 'none' ? 'none (HTTP only)' : type === 'manual' ? 'manual' : '-')],
      ...certificates.slice(1).map((text) => ['', '', '', '', '', text]),
    ];
  });
  return renderTable(['name', 'domain', 'default', 'address', 'status', 'certificates'], rows);
}
