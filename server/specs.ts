import { Type } from '@sinclair/typebox';
import { JobFile } from '../api/agent.js';
import { parseDurationOrOff } from '../api/duration.js';
import { remotePathProblem } from '../api/mappings.js';
import type { BackendType } from '../api/offer.js';
import { formatPath, validateSpec, type SpecError } from '../api/parse.js';
import { parseCountRange } from '../api/quantity.js';
import { normalizeResources } from '../api/resources.js';
import type { AnySpec, FleetSpec, RunSpec } from '../api/spec.js';
import { report, validateValue, type ValidationContext } from '../api/validate.js';
import type { FleetDesired } from '../store/fleets.js';
import type { ProjectRecord } from '../store/projects.js';
import { HttpError, invalidSpec } from './http-errors.js';

const DEFAULT_IDLE_DURATION = '5m';

const JobFiles = Type.Array(JobFile);

function unprocessable(what: string, errors: SpecError[]): HttpError {
  const lines = errors.map((e) => `${e.path || `(${what})`}: ${e.message}`);
  return invalidSpec(`invalid ${what}: ${lines.join('; ')}`, errors);
}

/** Validates a spec the way the CLI does; every problem comes back at once as a 422. */
export function checkedSpec(value: unknown): AnySpec {
  const { spec, errors } = validateSpec(value);
  if (!spec || errors.length > 0) throw unprocessable('spec', errors);
  return spec;
}

/**
 * Validates the files of an apply, every problem at once as a 422: what no runtime could ever write.
 * Whether an absolute path is allowed depends on the runtime, which only the agent knows.
 */
export function checkedFiles(value: unknown): JobFile[] {
  const context: ValidationContext = { environment: null, issues: [] };
  const files = validateValue(JobFiles, value, context, ['files']) as JobFile[];
  if (context.issues.length === 0) {
    files.forEach((file, index) => {
      const problem = remotePathProblem(file.path);
      if (problem) report(context, ['files', index, 'path'], problem);
    });
  }
  if (context.issues.length > 0) {
    throw unprocessable('files', context.issues.map((issue) => ({ file: null, line: null, column: null, path: formatPath(issue.path), message: issue.message })));
  }
  return files;
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
