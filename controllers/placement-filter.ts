import type { InstanceSelector, RunSpec } from '../api/spec.js';
import type { FleetRecord } from '../store/fleets.js';
import type { InstanceRecord } from '../store/instances.js';

/** What narrows where a run may go besides its resources: the backends, the fleets and the instances its spec names. */
export type RunPlaces = Partial<Pick<RunSpec, 'backends' | 'fleets' | 'instances'>>;

export interface FleetChoice {
  /** The fleets the run may be placed on, in the order given. */
  fleets: FleetRecord[];
  /** Whether an instance or an offer of this backend may take the run. */
  allows(backend: string): boolean;
  /** Why the run may not go elsewhere: each fleet left out, and each fleet named that does not exist. */
  excluded: string[];
  /** Why the run waits when no fleet is left: null while some are. */
  none: string | null;
}

/** The fleets (and, within them, the backends) that `backends` and `fleets` of a run leave it. */
export function chooseFleets(places: RunPlaces, fleets: readonly FleetRecord[]): FleetChoice {
  const backends = places.backends ?? null;
  const named = places.fleets ?? null;
  const allows = (backend: string) => backends === null || (backends as readonly string[]).includes(backend);
  const among = named && `among fleets: [${named.join(', ')}]`;
  const amongBackends = backends && `among backends: [${backends.join(', ')}]`;
  const kept: FleetRecord[] = [];
  const excluded: string[] = [];
  for (const fleet of fleets) {
    if (among && !named!.includes(fleet.name)) excluded.push(`fleet ${fleet.name} is not ${among}`);
    else if (!fleet.backends.some(allows)) excluded.push(`fleet ${fleet.name} uses ${fleet.backends.join(', ')}, not ${amongBackends}`);
    else kept.push(fleet);
  }
  for (const name of named ?? []) {
    if (!fleets.some((fleet) => fleet.name === name)) excluded.push(`no active fleet is named ${name}`);
  }
  const ofBackends = backends && `of backend${backends.length === 1 ? '' : 's'} ${backends.join(' or ')}`;
  const wanted = [among, ofBackends].filter(Boolean).join(' ');
  return {
    fleets: kept,
    allows,
    excluded,
    none: kept.length > 0 ? null : `no fleet ${wanted}: ${excluded.join('; ')}; the run waits until one is applied`,
  };
}

function selects(selector: string | InstanceSelector, instance: InstanceRecord, fleets: readonly FleetRecord[]): boolean {
  if (typeof selector === 'string') return instance.name === selector;
  if (selector.name !== undefined) return instance.name === selector.name;
  if (selector.hostname !== undefined) return instance.sshHost?.hostname === selector.hostname || instance.internalIp === selector.hostname;
  const fleet = fleets.find((f) => f.name === selector.fleet);
  return fleet !== undefined && instance.fleetId === fleet.id && instance.name === `${fleet.name}-${selector.instance}`;
}

/** `instances` as written, for messages: `my-fleet-3, 203.0.113.10, my-fleet instance 3`. */
export function describeSelectors(selectors: readonly (string | InstanceSelector)[]): string {
  return selectors.map((s) => (typeof s === 'string' ? s : s.name ?? s.hostname ?? `${s.fleet} instance ${s.instance}`)).join(', ');
}

/** The ids of the instances a run's `instances` names, among `instances`; null when it names none, and any instance may take it. */
export function targetedInstances(places: RunPlaces, fleets: readonly FleetRecord[], instances: readonly InstanceRecord[]): Set<string> | null {
  const selectors = places.instances;
  if (!selectors) return null;
  return new Set(instances.filter((i) => selectors.some((s) => selects(s, i, fleets))).map((i) => i.id));
}
