import { parseCountRange } from './quantity.js';
import type { FleetSpec } from './spec.js';
import { sshHosts, type SshConfig } from './ssh-fleet.js';
import type { ReportIssue } from './issue-place.js';

/** What an SSH fleet's hosts decide by themselves, so that the fleet may not say it too. */
const DECIDED_BY_HOSTS: Record<string, string> = {
  nodes: 'an SSH fleet\'s instances are its hosts, one each; list them under ssh_config.hosts',
  backends: 'an SSH fleet\'s instances are its own hosts, not a backend\'s',
  resources: 'an SSH fleet\'s resources are what its hosts have (detected over SSH)',
  idle_duration: 'the hosts of an SSH fleet stay in it until they are removed from ssh_config',
};

/** A fleet either provisions `nodes` from backends or is made of `ssh_config.hosts`, never both. */
export function checkFleet(spec: Record<string, unknown>, report: ReportIssue): void {
  const ssh = spec.ssh_config as SshConfig | undefined;
  if (ssh === undefined) {
    if (spec.nodes === undefined) report(['nodes'], 'required field is missing; a fleet needs nodes (such as 1 or 0..2), or ssh_config with its hosts', 'parent');
    else checkOpenEnded(spec, report);
    return;
  }
  for (const [field, why] of Object.entries(DECIDED_BY_HOSTS)) {
    if (spec[field] !== undefined) report([field], `cannot be combined with ssh_config: ${why}`, 'key');
  }
  if (!Array.isArray(ssh?.hosts) || ssh.hosts.some((h) => typeof h !== 'string' && (typeof h !== 'object' || h === null || typeof h.hostname !== 'string'))) return;
  const seen = new Set<string>();
  sshHosts(ssh).forEach((host, index) => {
    if (seen.has(host.name)) report(['ssh_config', 'hosts', index], `${host.name} is listed twice`, 'value');
    seen.add(host.name);
  });
}

/** Backends whose instances cost nothing by the hour here: a fleet of them alone may grow without an upper bound. */
const UNMETERED_BACKENDS = ['kubernetes'];

/**
 * `nodes: 0..` (no maximum) lets the fleet take as many instances as runs ask for: on a kubernetes fleet the cluster's
 * own nodes bound it, as in dstack; on a backend that bills by the hour it could spend without limit.
 */
function checkOpenEnded(spec: Record<string, unknown>, report: ReportIssue): void {
  let nodes: FleetNodes;
  try {
    nodes = fleetNodes(spec.nodes as Parameters<typeof fleetNodes>[0]);
  } catch {
    return;
  }
  const backends = Array.isArray(spec.backends) ? spec.backends as string[] : [];
  if (nodes.max !== null || (backends.length > 0 && backends.every((b) => UNMETERED_BACKENDS.includes(b)))) return;
  const { min, target } = nodes;
  const bound = typeof spec.nodes === 'object' ? `a max, e.g. {min: ${min}, target: ${target}, max: ${target + 4}}` : `an upper bound, e.g. ${min}..${min + 4}`;
  report(['nodes'], `an open range is not supported on a fleet that may rent machines, as it could spend without limit; give ${bound} (a fleet with backends: [kubernetes] alone may leave it open: the cluster's nodes bound it)`, 'value');
}

export interface FleetNodes {
  min: number;
  /** Instances apply provisions: min unless `nodes.target` says more. */
  target: number;
  max: number | null;
}

/** A fleet's `nodes` as numbers: `n`, `min..max` or `{min, target, max}`. */
export function fleetNodes(nodes: NonNullable<FleetSpec['nodes']>): FleetNodes {
  if (typeof nodes === 'object') return { min: nodes.min, target: nodes.target, max: nodes.max ?? null };
  const range = parseCountRange(nodes, { least: 0, bounded: false, what: 'node count' });
  return { min: range.min ?? 0, target: range.min ?? 0, max: range.max };
}

/** `nodes` as written in a plan: `2`, `0..4`, or `0..4, target 2`. */
export function describeFleetNodes(nodes: NonNullable<FleetSpec['nodes']>): string {
  if (typeof nodes !== 'object') return String(nodes);
  return `${nodes.min}..${nodes.max ?? ''}, target ${nodes.target}`;
}
