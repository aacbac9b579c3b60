import { Type } from '@sinclair/typebox';
import { JobFile, JobRepo } from '../api/agent.js';
import { parseDurationOrOff } from '../api/duration.js';
import { parseRepoEntry, remotePathProblem } from '../api/mappings.js';
import type { BackendType } from '../api/offer.js';
import type { GatewaySpec } from '../api/gateways.js';
import { formatPath, validateSpec, type ConfigSpec, type SpecError } from '../api/parse.js';
import { fleetNodes } from '../api/fleet-rules.js';
import { normalizeResources } from '../api/resources.js';
import { DEFAULT_IDLE_DURATION, type FleetSpec, type RunSpec } from '../api/spec.js';
import { sshHosts, type SshConfig } from '../api/ssh-fleet.js';
import { describeValue, report, validateValue, type ValidationContext } from '../api/validate.js';
import type { FleetDesired } from '../store/fleets.js';
import type { ProjectRecord } from '../store/projects.js';
import { HttpError, invalidSpec } from './http-errors.js';

const JobFiles = Type.Array(JobFile);
const JobRepos = Type.Array(JobRepo);

function unprocessable(what: string, errors: SpecError[]): HttpError {
  const lines = errors.map((e) => `${e.path || `(${what})`}: ${e.message}`);
  return invalidSpec(`invalid ${what}: ${lines.join('; ')}`, errors);
}

/** Validates a spec the way the CLI does; every problem comes back at once as a 422. */
export function checkedSpec(value: unknown): ConfigSpec {
  const { spec, errors } = validateSpec(value);
  if (!spec || errors.length > 0) throw unprocessable('spec', errors);
  return spec;
}

/**
 * Validates the files of an apply, every problem at once as a 422: what no runtime could ever write.
 * Whether an absolute path is allowed depends on the runtime, which only the agent knows.
 */
export function checkedFiles(value: unknown): JobFile[] {
  const { files, errors } = validateFiles(value);
  if (errors.length > 0) throw unprocessable('files', errors);
  return files;
}

function validateFiles(value: unknown): { files: JobFile[]; errors: SpecError[] } {
  const context: ValidationContext = { environment: null, issues: [] };
  const files = validateValue(JobFiles, value, context, ['files']) as JobFile[];
  if (context.issues.length === 0) {
    files.forEach((file, index) => {
      const problem = remotePathProblem(file.path);
      if (problem) report(context, ['files', index, 'path'], problem);
    });
  }
  return { files, errors: context.issues.map((issue) => ({ file: null, line: null, column: null, path: formatPath(issue.path), message: issue.message })) };
}

/**
 * The repos of a run as its agent will check them out: those the CLI read from the applier's machine
 * (`value`, one per entry of the spec's `repos`), else each URL entry as written. A local entry without
 * what the CLI read is a problem: only the applier's machine has that folder.
 */
function validateRepos(spec: RunSpec, value: unknown): { repos: JobRepo[]; errors: SpecError[] } {
  const context: ValidationContext = { environment: null, issues: [] };
  const entries = spec.repos ?? [];
  const sent = value === undefined ? undefined : validateValue(JobRepos, value, context, ['repos']) as JobRepo[];
  if (sent !== undefined && context.issues.length === 0 && sent.length !== entries.length) {
    report(context, ['repos'], `expected ${entries.length} (one per entry of the spec's repos), got ${sent.length}`);
  }
  const repos: JobRepo[] = [];
  if (context.issues.length === 0) {
    entries.forEach((written, index) => {
      const entry = parseRepoEntry(written);
      const ifExists = entry.ifExists === undefined ? {} : { ifExists: entry.ifExists };
      if (sent !== undefined) repos.push({ ...sent[index]!, ...ifExists });
      else if (entry.url !== null) repos.push({ path: entry.path, url: entry.url, branch: entry.branch, hash: entry.hash, ...ifExists });
      else report(context, ['spec', 'repos', index], `the local repo ${entry.localPath} is read from the applier's machine; apply it with orchestrator apply, or give its url`);
    });
  }
  return { repos, errors: context.issues.map((issue) => ({ file: null, line: null, column: null, path: formatPath(issue.path), message: issue.message })) };
}

export function checkedRepos(spec: RunSpec, value: unknown): JobRepo[] {
  const { repos, errors } = validateRepos(spec, value);
  if (errors.length > 0) throw unprocessable('repos', errors);
  return repos;
}

export function checkedRunSpec(value: unknown): RunSpec {
  const spec = checkedSpec(value);
  if (spec.type === 'fleet') throw invalidSpec('this is a fleet; apply it under /fleets');
  if (spec.type === 'gateway') throw invalidSpec('this is a gateway; apply it under /apply');
  return spec;
}

export function checkedFleetSpec(value: unknown): FleetSpec {
  const spec = checkedSpec(value);
  if (spec.type !== 'fleet') throw invalidSpec(`this is a ${spec.type}; apply it under /runs`);
  return spec;
}

/** Why the fleet's backends cannot be used in this project, or null when they can. */
function backendsProblem(spec: FleetSpec, project: ProjectRecord): string | null {
  if (spec.backends?.includes('ssh')) return 'ssh is the backend of SSH fleets, whose hosts are listed under ssh_config.hosts';
  const configured: string[] = project.backends.map((b) => b.type);
  const missing = (spec.backends ?? []).filter((b) => !configured.includes(b));
  if (missing.length === 0) return null;
  return `${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not configured for project ${project.name}; configured: ${configured.join(', ') || 'none'} (see the server's config.yml)`;
}

/** The settings a fleet spec implies for this project; a backend the project lacks is the user's mistake. */
export function fleetDesired(spec: FleetSpec, project: ProjectRecord): FleetDesired {
  const problem = backendsProblem(spec, project);
  if (problem) throw invalidSpec(`backends: ${problem}`);
  if (spec.ssh_config) return sshFleetDesired(spec, spec.ssh_config);
  const backends: BackendType[] = spec.backends ?? project.backends.map((b) => b.type);
  const nodes = fleetNodes(spec.nodes!);
  return {
    name: spec.name,
    spec: spec as unknown as Record<string, unknown>,
    requirement: { ...normalizeResources(spec.resources, 'fleet', spec.max_price), ...(spec.spot_policy ? { spot: spec.spot_policy } : {}) },
    nodesMin: nodes.min,
    nodesMax: nodes.max,
    nodesTarget: nodes.target,
    idleSeconds: parseDurationOrOff(spec.idle_duration ?? DEFAULT_IDLE_DURATION),
    backends,
  };
}

/** An SSH fleet is exactly its hosts: each one instance, kept until it leaves ssh_config. */
function sshFleetDesired(spec: FleetSpec, ssh: SshConfig): FleetDesired {
  const hosts = sshHosts(ssh).length;
  return {
    name: spec.name,
    spec: spec as unknown as Record<string, unknown>,
    requirement: normalizeResources(undefined, 'fleet'),
    nodesMin: hosts,
    nodesMax: hosts,
    nodesTarget: hosts,
    idleSeconds: null,
    backends: ['ssh'],
  };
}

/** The fleets applied together with a run (`fleets` of a run's plan), which its plan counts as if they existed. */
export function checkedFleetsApplied(value: unknown, project: ProjectRecord): FleetDesired[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw invalidSpec(`fleets: expected a list of fleet specs, got ${describeValue(value)}`);
  return value.map((spec) => fleetDesired(checkedFleetSpec(spec), project));
}

/** One valid object of a batch apply. */
export type ApplyingItem =
  | { kind: 'fleet'; desired: FleetDesired }
  | { kind: 'run'; spec: RunSpec; files: JobFile[]; repos: JobRepo[] };

/** One valid object of `orchestrator apply`: a fleet or run, or a gateway, which is not a custom resource. */
export type BatchItem = ApplyingItem | { kind: 'gateway'; spec: GatewaySpec };

/** A problem of one object of a batch apply: its index, and the field within it (`spec.resources.gpu`, `files[0].path`). */
export interface ItemProblem {
  index: number;
  path: string;
  message: string;
}

const ITEM_FIELDS = ['spec', 'files', 'repos'];

/** Validates one object of an apply, `{spec, files?, repos?}`; null when it has a problem, each told by its field. */
export function checkedItem(item: unknown, project: ProjectRecord, problem: (path: string, message: string) => void): ApplyingItem | null {
  if (typeof item !== 'object' || item === null || Array.isArray(item)) {
    problem('', `expected {spec, files?}, got ${describeValue(item)}`);
    return null;
  }
  const fields = item as Record<string, unknown>;
  for (const key of Object.keys(fields).filter((k) => !ITEM_FIELDS.includes(k))) problem(key, 'unknown field; an item has spec and, for a run, files and repos');
  const { spec, errors } = validateSpec(fields.spec);
  for (const error of errors) problem(error.path === '' ? 'spec' : `spec.${error.path}`, error.message);
  const files = validateFiles(fields.files ?? []);
  for (const error of files.errors) problem(error.path, error.message);
  if (!spec) return null;
  if (spec.type === 'gateway') {
    problem('spec.type', 'a gateway is applied with orchestrator apply, not as a custom resource');
    return null;
  }
  if (spec.type !== 'fleet') {
    const repos = validateRepos(spec, fields.repos);
    for (const error of repos.errors) problem(error.path, error.message);
    return { kind: 'run', spec, files: files.files, repos: repos.repos };
  }
  if (fields.files !== undefined) problem('files', 'a fleet takes no files');
  if (fields.repos !== undefined) problem('repos', 'a fleet takes no repos');
  const backends = backendsProblem(spec, project);
  if (backends) problem('spec.backends', backends);
  return backends ? null : { kind: 'fleet', desired: fleetDesired(spec, project) };
}

/**
 * Validates every object of a batch apply (`{items: [{spec, files?}]}`) before anything is written:
 * one 422 names every problem with its item and field, and nothing is applied.
 */
export function checkedApplyItems(body: Record<string, unknown>, project: ProjectRecord): BatchItem[] {
  const problems: ItemProblem[] = [];
  const { items } = body;
  if (!Array.isArray(items) || items.length === 0) {
    throw invalidSpec(`items: expected a list of at least one {spec, files?}, got ${describeValue(items)}`);
  }
  const checked = items.map((item, index) => checkedBatchItem(item, project, (path, message) => problems.push({ index, path, message })));
  const names = new Map<string, number>();
  checked.forEach((item, index) => {
    if (!item) return;
    const kind = item.kind;
    const name = kind === 'fleet' ? item.desired.name : item.spec.name;
    if (name === undefined) return;
    const earlier = names.get(`${kind}:${name}`);
    if (earlier !== undefined) problems.push({ index, path: 'spec.name', message: `the ${kind} name "${name}" is also used by items[${earlier}]` });
    else names.set(`${kind}:${name}`, index);
  });
  if (problems.length > 0) {
    const lines = problems.map((p) => `items[${p.index}]${p.path === '' ? '' : `.${p.path}`}: ${p.message}`);
    throw invalidSpec(`nothing was applied: ${lines.join('; ')}`, problems);
  }
  return checked as BatchItem[];
}

/** A gateway item is `{spec}` alone; any other goes through `checkedItem`. */
function checkedBatchItem(item: unknown, project: ProjectRecord, problem: (path: string, message: string) => void): BatchItem | null {
  const fields = item as { spec?: { type?: unknown } } | null;
  if (fields?.spec?.type !== 'gateway') return checkedItem(item, project, problem);
  for (const key of Object.keys(fields).filter((k) => k !== 'spec')) problem(key, 'a gateway takes no files or repos; an item has spec alone');
  const { spec, errors } = validateSpec(fields.spec);
  for (const error of errors) problem(error.path === '' ? 'spec' : `spec.${error.path}`, error.message);
  return spec?.type === 'gateway' ? { kind: 'gateway', spec } : null;
}
