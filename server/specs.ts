import { parseDurationOrOff } from '../api/duration.js';
import type { BackendType } from '../api/offer.js';
import { validateSpec } from '../api/parse.js';
import { parseCountRange } from '../api/quantity.js';
import { normalizeResources } from '../api/resources.js';
import type { AnySpec, FleetSpec, RunSpec } from '../api/spec.js';
import type { FleetDesired } from '../store/fleets.js';
import type { ProjectRecord } from '../store/projects.js';
import { invalidSpec } from './http-errors.js';

const DEFAULT_IDLE_DURATION = '5m';

/** Validates a spec the way the CLI does; every problem comes back at once as a 422. */
export function checkedSpec(value: unknown): AnySpec {
  const { spec, errors } = validateSpec(value);
  if (!spec || errors.length > 0) {
    const lines = errors.map((e) => `${e.path || '(spec)'}: ${e.message}`);
    throw invalidSpec(`invalid spec: ${lines.join('; ')}`, errors);
  }
  return spec;
}

export function checkedRunSpec(value: unknown): RunSpec {
  const spec = checkedSpec(value);
  if (spec.type === 'fleet') throw invalidSpec('this is a fleet; apply it under /fleets');
  return spec;
}

export function checkedFleetSpec(value: unknown): FleetSpec {
  const spec = checkedSpec(value);
  if (spec.type !== 'fleet') throw invalidSpec(`this is a ${spec.type}; apply it under /runs`);
  return spec;
}

/** The settings a fleet spec implies for this project; a backend the project lacks is the user's mistake. */
export function fleetDesired(spec: FleetSpec, project: ProjectRecord): FleetDesired {
  const configured = project.backends.map((b) => b.type);
  const backends: BackendType[] = spec.backends ?? configured;
  const missing = backends.filter((b) => !configured.includes(b));
  if (missing.length > 0) {
    throw invalidSpec(`backends: ${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not configured for project ${project.name}; configured: ${configured.join(', ') || 'none'} (see the server's config.yml)`);
  }
  const nodes = parseCountRange(spec.nodes, { least: 0, bounded: false, what: 'nodes' });
  return {
    name: spec.name,
    spec: spec as unknown as Record<string, unknown>,
    requirement: normalizeResources(spec.resources, 'fleet'),
    nodesMin: nodes.min ?? 0,
    nodesMax: nodes.max,
    idleSeconds: parseDurationOrOff(spec.idle_duration ?? DEFAULT_IDLE_DURATION),
    backends,
  };
}
