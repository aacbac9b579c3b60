import type { Fleet } from '../api/objects.js';
import { formatGpuInfo, formatPrice } from './format.js';
import { renderTable } from './table.js';

/** One row per instance, and one for each fleet that has none. */
export function renderFleets(fleets: readonly Fleet[]): string {
  const rows = fleets.flatMap((fleet) => {
    const fleetStatus = fleet.statusMessage ? `${fleet.status}: ${fleet.statusMessage}` : fleet.status;
    if (fleet.instances.length === 0) return [[fleet.name, '-', fleetBackends(fleet), '-', `${fleetStatus} (no instances)`, '-', '-']];
    return fleet.instances.map((instance, index) => [
      index === 0 ? fleet.name : '',
      instance.name,
      instance.backend,
      formatGpuInfo(instance.gpu),
      instance.statusMessage ? `${instance.status}: ${instance.statusMessage}` : instance.status,
      formatPrice(instance.pricePerHour),
      instance.run ?? '-',
    ]);
  });
  return renderTable(['fleet', 'instance', 'backend', 'gpu', 'status', '$/h', 'run'], rows);
}

function fleetBackends(fleet: Fleet): string {
  const backends = fleet.spec.backends;
  return Array.isArray(backends) ? backends.join(',') : '-';
}
