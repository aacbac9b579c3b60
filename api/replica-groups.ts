import type { ReplicaGroup, ServiceSpec } from './spec.js';

/**
 * A service's replicas as groups, each with the spec its replicas run: the service's, with the group's count as
 * replicas, its scaling, and its commands, image, resources and spot_policy in place of the service's; its image or
 * python replaces both of the service's, as either names what the replicas run in. A service whose replicas are a
 * number or range is one group without a name.
 */
export interface ReplicaGroupSpec {
  name: string | null;
  spec: ServiceSpec;
}

export function replicaGroupsOf(spec: ServiceSpec): ReplicaGroupSpec[] {
  if (!Array.isArray(spec.replicas)) return [{ name: null, spec }];
  const { replicas: groups, scaling: _scaling, ...service } = spec;
  return groups.map((group: ReplicaGroup, index) => {
    const { name, count, ...own } = group;
    const { image: _image, python: _python, ...withoutImage } = service;
    const base = own.image !== undefined || own.python !== undefined ? withoutImage : service;
    return { name: name ?? String(index), spec: { ...base, ...own, replicas: count } };
  });
}

/** The spec a replica of group `name` runs; the service's own for a service without groups (null). */
export function groupSpec(spec: ServiceSpec, name: string | null): ServiceSpec | null {
  return replicaGroupsOf(spec).find((group) => group.name === name)?.spec ?? null;
}
