import type { Fleet } from '../api/objects.js';
import { formatCost, formatGpuInfo, formatPrice, formatTime } from './format.js';
import { renderTable } from './table.js';

const SHORT_ID_CHARS = 8;

/**
 * One row per instance. A fleet gets a row of its own when it has something to say (a status other
 * than a plain `active`, or no instances). With `history`, ended fleets may share a name with others,
 * so each fleet's row also shows its short id and when it was created.
 */
export function renderFleets(fleets: readonly Fleet[], history = false, width?: number): string {
  const rows = fleets.flatMap((fleet) => {
    const fleetStatus = fleet.statusMessage ? `${fleet.status}: ${fleet.statusMessage}` : fleet.status;
    const identity = history ? [fleet.id.slice(0, SHORT_ID_CHARS), formatTime(fleet.createdAt)] : [];
    const blankIdentity = identity.map(() => '');
    const instanceRows = fleet.instances.map((instance) => [
      instance.name,
      instance.host ? `${instance.backend} ${instance.host}` : instance.backend,
      formatGpuInfo(instance.gpu),
      instance.statusMessage ? `${instance.status}: ${instance.statusMessage}` : instance.status,
      formatPrice(instance.pricePerHour),
      formatCost(instance.cost),
      instance.blocks ? `blocks ${instance.blocks.busy}/${instance.blocks.total} busy` : instance.run ?? '-',
    ]);
    if (instanceRows.length === 0) return [[fleet.name, ...identity, '-', fleetBackends(fleet), '-', `${fleetStatus} (no instances)`, '-', '-', '-']];
    const fleetRow = fleetStatus === 'active' ? [] : [[fleet.name, ...identity, '-', fleetBackends(fleet), '-', fleetStatus, '-', '-', '-']];
    return [
      ...fleetRow,
      ...instanceRows.map((row, index) => (index === 0 && fleetRow.length === 0 ? [fleet.name, ...identity, ...row] : ['', ...blankIdentity, ...row])),
    ];
  });
  return renderTable(['fleet', ...(history ? ['id', 'created'] : []), 'instance', 'backend', 'gpu', 'status', '$/h', 'cost', 'run'], rows, width);
}

function fleetBackends(fleet: Fleet): string {
  const backends = fleet.spec.backends;
  return Array.isArray(backends) ? backends.join(',') : '-';
}
