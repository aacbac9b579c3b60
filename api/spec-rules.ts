import { parsePortMapping } from './mappings.js';
import { parseCountRange } from './quantity.js';
import type { IssueAt, Path } from './validate.js';

type Report = (path: Path, message: string, at: IssueAt) => void;

function attempt<T>(parse: () => T): T | null {
  try {
    return parse();
  } catch {
    return null;
  }
}

function checkPorts(ports: unknown, report: Report): void {
  if (!Array.isArray(ports)) return;
  const seen = { local: new Set<number>(), container: new Set<number>() };
  ports.forEach((entry, index) => {
    const mapping = typeof entry === 'number' || typeof entry === 'string' ? attempt(() => parsePortMapping(entry)) : null;
    if (!mapping) return;
    for (const side of ['local', 'container'] as const) {
      if (seen[side].has(mapping[side])) report(['ports', index], `${side} port ${mapping[side]} is listed twice`, 'value');
      seen[side].add(mapping[side]);
    }
  });
}

function checkScaling(spec: Record<string, unknown>, report: Report): void {
  const written = spec.replicas;
  const replicas = typeof written === 'number' || typeof written === 'string'
    ? attempt(() => parseCountRange(written, { least: 0, bounded: true, what: 'replica count' }))
    : { min: 1, max: 1 };
  if (!replicas) return;
  const fixed = replicas.min === replicas.max;
  if (!fixed && spec.scaling === undefined) {
    report(['scaling'], `required field is missing; replicas "${String(written)}" is a range, and scaling (metric rps, target) sets how the count follows load`, 'parent');
  }
  if (fixed && spec.scaling !== undefined) {
    report(['scaling'], `scaling needs replicas as a range such as 1..4; replicas is fixed at ${replicas.min}`, 'key');
  }
}

/** Rules that tie several fields of one spec together, checked after each field on its own. */
export function checkSpecRules(spec: Record<string, unknown>, report: Report): void {
  const type = spec.type;
  if (type === 'fleet') return;
  if (spec.image !== undefined && spec.python !== undefined) {
    report(['python'], 'cannot be combined with image; the image brings its own Python', 'key');
  }
  if (spec.registry_auth !== undefined && spec.image === undefined) {
    report(['registry_auth'], 'only used to pull image, which is not set', 'key');
  }
  if ((type === 'task' || type === 'service') && spec.commands === undefined && spec.image === undefined) {
    report(['commands'], `required field is missing; a ${type} without an image needs commands`, 'parent');
  }
  checkPorts(spec.ports, report);
  if (type === 'service') checkScaling(spec, report);
}
