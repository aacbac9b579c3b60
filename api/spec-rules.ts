import type { TObject } from '@sinclair/typebox';
import { parseDuration } from './duration.js';
import { parsePortMapping } from './mappings.js';
import { parseCountRange } from './quantity.js';
import { DIND_IMAGE, entrypointWords, NVCC_IMAGE } from './run-container.js';
import { checkFleet } from './fleet-rules.js';
import { Resources, type SpecType } from './spec.js';
import type { IssueAt, Path, ReportIssue } from './issue-place.js';

/** Request statistics are kept for an hour (store/service-stats.ts), so a longer window would see only part of it. */
export const MAX_SCALING_WINDOW_SECONDS = 3600;

/** The runs a schedule submits are named `<name>-<n>`: this leaves room for n up to 8 digits within a name's 40 characters. */
export const MAX_SCHEDULED_NAME_LENGTH = 31;

function attempt<T>(parse: () => T): T | null {
  try {
    return parse();
  } catch {
    return null;
  }
}

function checkPorts(ports: unknown, report: ReportIssue): void {
  if (!Array.isArray(ports)) return;
  const seen = { local: new Set<number>(), container: new Set<number>() };
  ports.forEach((entry, index) => {
    const mapping = typeof entry === 'number' || typeof entry === 'string' ? attempt(() => parsePortMapping(entry)) : null;
    if (!mapping) return;
    for (const side of ['local', 'container'] as const) {
      const port = mapping[side];
      if (port === null) continue;
      if (seen[side].has(port)) report(['ports', index], `${side} port ${port} is listed twice`, 'value');
      seen[side].add(port);
    }
  });
}

function checkEntrypoint(type: unknown, entrypoint: string, report: ReportIssue): void {
  if (type === 'dev-environment') {
    report(['entrypoint'], 'not supported for a dev environment (nor in dstack): its init runs in the shell, and it stays up until stopped', 'key');
    return;
  }
  try {
    if (entrypointWords(entrypoint).length === 0) report(['entrypoint'], 'expected a command line such as "python -m http.server"; it has no words', 'value');
  } catch (error) {
    const why = (error as Error).message.replace(/^Got EOF while in /, 'it ends inside ');
    report(['entrypoint'], `expected a command line such as "python -m http.server", split into words as a shell splits it; ${why}`, 'value');
  }
}

function checkScaling(spec: Record<string, unknown>, report: ReportIssue): void {
  if (Array.isArray(spec.replicas)) {
    checkReplicaGroups(spec, spec.replicas, report);
    return;
  }
  checkCountScaling(spec.replicas, spec.scaling, [], 'replicas', report);
}

/** A count (replicas, or a group's count) and its scaling, at `at`: a range needs scaling, a fixed count takes none. */
function checkCountScaling(written: unknown, scaling: unknown, at: Path, field: string, report: ReportIssue): void {
  const count = typeof written === 'number' || typeof written === 'string'
    ? attempt(() => parseCountRange(written, { least: 0, bounded: true, what: 'replica count' }))
    : { min: 1, max: 1 };
  if (!count) return;
  const fixed = count.min === count.max;
  if (!fixed && scaling === undefined) {
    report([...at, 'scaling'], `required field is missing; ${field} "${String(written)}" is a range, and scaling (metric rps, target) sets how the count follows load`, 'parent');
  }
  if (fixed && scaling !== undefined) {
    report([...at, 'scaling'], `scaling needs ${field} as a range such as 1..4; ${field} is fixed at ${count.min}`, 'key');
  }
  const window = (scaling as Record<string, unknown> | undefined)?.window;
  const seconds = typeof window === 'string' || typeof window === 'number' ? attempt(() => parseDuration(window)) : null;
  if (seconds !== null && seconds > MAX_SCALING_WINDOW_SECONDS) {
    report([...at, 'scaling', 'window'], 'at most 1h: request statistics are kept for an hour', 'value');
  }
}

/** Each group's count with its own scaling, names told apart, and commands or an image for each. */
function checkReplicaGroups(spec: Record<string, unknown>, groups: unknown[], report: ReportIssue): void {
  if (spec.scaling !== undefined) report(['scaling'], 'with replica groups, each group with a count range takes its own scaling; move scaling into those groups', 'key');
  const names = new Map<string, number>();
  groups.forEach((group, index) => {
    if (!isMap(group)) return;
    checkCountScaling(group.count, group.scaling, ['replicas', index], 'count', report);
    const name = typeof group.name === 'string' ? group.name : String(index);
    const earlier = names.get(name);
    if (earlier !== undefined) report(['replicas', index, 'name'], `"${name}" names group ${earlier} as well; each replica group needs its own name`, 'value');
    else names.set(name, index);
    if (group.image !== undefined && group.python !== undefined) report(['replicas', index, 'python'], 'cannot be combined with image; the image brings its own Python', 'key');
    if (spec.commands === undefined && spec.image === undefined && group.commands === undefined && group.image === undefined) {
      report(['replicas', index, 'commands'], 'required field is missing; a replica group needs commands or an image, here or at the top level', 'parent');
    }
  });
}

/** Each map of `instances` names one instance one way: by name, by hostname, or by fleet and number. */
function checkInstanceSelectors(selectors: unknown[], report: ReportIssue): void {
  selectors.forEach((selector, index) => {
    if (!isMap(selector)) return;
    const forms = [selector.name !== undefined, selector.hostname !== undefined, selector.fleet !== undefined || selector.instance !== undefined].filter(Boolean).length;
    if (forms !== 1) {
      report(['instances', index], 'expected one of name, hostname, or fleet with instance (its number in the fleet), such as {fleet: my-fleet, instance: 3}', forms === 0 ? 'value' : 'key');
      return;
    }
    if ((selector.fleet === undefined) !== (selector.instance === undefined)) {
      const missing = selector.fleet === undefined ? 'fleet' : 'instance';
      report(['instances', index, missing], `required field is missing; ${missing === 'fleet' ? 'instance is a number within a fleet: give its fleet' : 'a fleet names its instance by number: give instance, such as 3 for my-fleet-3'}`, 'parent');
    }
  });
}

/** `nvcc: true` runs in NVCC_IMAGE: not with an image of the run's own. */
function checkNvcc(spec: Record<string, unknown>, report: ReportIssue): void {
  if (spec.image !== undefined) report(['nvcc'], `cannot be combined with image, as in dstack: nvcc: true runs in ${NVCC_IMAGE}; give an image that has the CUDA compiler, such as nvidia/cuda:12.8.1-devel-ubuntu24.04, and leave nvcc out`, 'key');
}

/** Rules that tie several fields of one spec together, checked after each field on its own. */
export function checkSpecRules(spec: Record<string, unknown>, report: ReportIssue): void {
  const type = spec.type;
  if (type === 'fleet') {
    checkFleet(spec, report);
    return;
  }
  if (spec.image !== undefined && spec.python !== undefined) {
    report(['python'], 'cannot be combined with image; the image brings its own Python', 'key');
  }
  for (const field of spec.docker === true ? ['image', 'python', 'nvcc'] : []) {
    if (spec[field] !== undefined && spec[field] !== false) report([field], `cannot be combined with docker: true, which runs in dstack's Docker-in-Docker image (${DIND_IMAGE}), as in dstack`, 'key');
  }
  if (spec.nvcc === true && spec.docker !== true) checkNvcc(spec, report);
  if (spec.registry_auth !== undefined && spec.image === undefined) {
    report(['registry_auth'], 'only used to pull image, which is not set', 'key');
  }
  if ((type === 'task' || type === 'service') && spec.commands === undefined && spec.image === undefined && !Array.isArray(spec.replicas)) {
    report(['commands'], `required field is missing; a ${type} without an image needs commands`, 'parent');
  }
  if (typeof spec.entrypoint === 'string') checkEntrypoint(type, spec.entrypoint, report);
  checkPorts(spec.ports, report);
  if (type === 'service') checkScaling(spec, report);
  if (Array.isArray(spec.instances)) checkInstanceSelectors(spec.instances, report);
  if (spec.schedule !== undefined && typeof spec.name === 'string' && spec.name.length > MAX_SCHEDULED_NAME_LENGTH) {
    report(['name'], `at most ${MAX_SCHEDULED_NAME_LENGTH} characters for a scheduled ${String(type)}, whose runs are named <name>-<number>`, 'value');
  }
}

const RUN_KINDS: readonly SpecType[] = ['task', 'service', 'dev-environment'];
const ALL_KINDS: readonly SpecType[] = ['fleet', ...RUN_KINDS];

/**
 * A dstack field this orchestrator does not take. Where `sameMeaning` holds for the value written, the
 * field asks for what happens here anyway, and is dropped instead of refused.
 */
interface Unsupported {
  kinds: readonly SpecType[];
  path: readonly string[];
  message: string;
  sameMeaning?: (value: unknown) => boolean;
}

const NO_CLOUD_CHOICE = 'the scheduler takes the cheapest offer of the fleet\'s backends that fits, wherever it is';

/** dstack's configuration fields that have no counterpart here, with why; docs/compatibility.md has the whole table. */
export const UNSUPPORTED: readonly Unsupported[] = [
  { kinds: ['fleet'], path: ['termination_policy'], message: 'termination_policy is deprecated in dstack; use idle_duration' },
  { kinds: ['fleet'], path: ['termination_idle_time'], message: 'termination_idle_time is deprecated in dstack; use idle_duration' },
  { kinds: ['fleet'], path: ['retry'], message: 'retry on a fleet is not supported: a fleet keeps trying to reach its minimum; set retry on runs' },
  { kinds: ALL_KINDS, path: ['regions'], message: `choosing regions is not supported: ${NO_CLOUD_CHOICE}` },
  { kinds: ALL_KINDS, path: ['availability_zones'], message: `choosing availability zones is not supported: ${NO_CLOUD_CHOICE}` },
  { kinds: ALL_KINDS, path: ['instance_types'], message: `choosing instance types is not supported: machines are chosen by resources; ${NO_CLOUD_CHOICE}` },
  { kinds: ALL_KINDS, path: ['reservation'], message: 'reservations are not supported: the backends here sell no reserved capacity' },
  { kinds: ALL_KINDS, path: ['tags'], message: 'tags are not supported: the backends here take no resource tags' },
  { kinds: ALL_KINDS, path: ['backend_options'], message: 'backend_options are not supported: the backends here take no per-configuration options' },
  { kinds: RUN_KINDS, path: ['creation_policy'], message: 'creation_policy reuse-or-create is not supported: a run only takes instances of fleets; apply a fleet to create them', sameMeaning: (v) => v === 'reuse' },
  { kinds: RUN_KINDS, path: ['idle_duration'], message: 'idle_duration on a run is not supported: instances belong to fleets; set idle_duration on the fleet' },
  { kinds: RUN_KINDS, path: ['user'], message: 'user is not supported: the commands run as the image\'s default user' },
  { kinds: RUN_KINDS, path: ['dstack'], message: 'access to the server from inside the run is not supported: a run gets no server address or token; drive the orchestrator from outside the run, with the CLI or the HTTP API', sameMeaning: (v) => v === false },
  { kinds: RUN_KINDS, path: ['single_branch'], message: 'single_branch: false is not supported: a repo is cloned at one commit', sameMeaning: (v) => v === true },
  { kinds: RUN_KINDS, path: ['home_dir'], message: 'home_dir is deprecated in dstack and has no effect there; remove it' },
  { kinds: RUN_KINDS, path: ['setup'], message: 'setup is deprecated in dstack; put its commands first in commands (init for a dev environment)' },
  { kinds: ['task'], path: ['groups'], message: 'node groups are not supported: the nodes of a multi-node task are alike; give nodes, commands and resources at the top level' },
  { kinds: ['service'], path: ['groups'], message: 'groups is not a field of a service: give replica groups as a list under replicas, each with count, commands and resources' },
  { kinds: ['service'], path: ['model', 'format'], message: 'model formats other than openai are not supported: the model endpoint speaks the OpenAI API; serve the model with an OpenAI-compatible server (vLLM, SGLang, TGI\'s /v1) and set format: openai', sameMeaning: (v) => v === 'openai' },
  { kinds: ['service'], path: ['router'], message: 'routers are not supported: the proxy balances requests over the ready replicas itself, without prefill or decode roles; remove router, or run the router as a service of its own that calls the workers\' service' },
  { kinds: ['dev-environment'], path: ['version'], message: 'version (of the IDE) is not supported: the desktop IDE brings its own server when it connects over ssh' },
  { kinds: RUN_KINDS, path: ['resources', 'gpu', 'total_memory'], message: 'total_memory is not supported: give the memory of one card (memory) and count' },
  { kinds: RUN_KINDS, path: ['resources', 'gpu', 'compute_capability'], message: 'compute_capability is not supported: name the models instead, such as H100,H200' },
  { kinds: ['fleet'], path: ['resources', 'gpu', 'total_memory'], message: 'total_memory is not supported: give the memory of one card (memory) and count' },
  { kinds: ['fleet'], path: ['resources', 'gpu', 'compute_capability'], message: 'compute_capability is not supported: name the models instead, such as H100,H200' },
];

/** dstack's other backends: each is refused by name in `backends`. */
const DSTACK_ONLY_BACKENDS = [
  'aws', 'azure', 'gcp', 'lambda', 'runpod', 'vastai', 'nebius', 'oci', 'cudo', 'datacrunch', 'verda', 'vultr',
  'hotaisle', 'cloudrift', 'digitalocean', 'amddevcloud', 'tensordock', 'crusoe', 'jarvislabs', 'slurm', 'dstack', 'remote',
];

/** dstack's configuration kinds that are not taken here, and why they are refused. */
export const UNSUPPORTED_TYPES: Record<string, string> = {
  volume: 'there are no network volumes here; a run mounts a directory of its instance with volumes (instance_path:path)',
};

const IMPORTED = 'is another project\'s (dstack\'s exports); imported resources are not supported: each project here has its own fleets and gateways, so apply one in this project and name it';

/** Refusals inside lists and values of known fields: network volumes, imported fleets and gateways. */
function refusedItems(spec: Record<string, unknown>, type: SpecType): [Path, string, IssueAt][] {
  const found: [Path, string, IssueAt][] = [];
  const entries = (field: string): [number, unknown][] => (Array.isArray(spec[field]) ? [...(spec[field] as unknown[]).entries()] : []);
  if (type !== 'fleet') {
    for (const [index, volume] of entries('volumes')) {
      if (isMap(volume) && Object.hasOwn(volume, 'name')) {
        found.push([['volumes', index, 'name'], 'network volumes are not supported: a run mounts a directory of its instance; write instance_path and path instead of name', 'key']);
      }
    }
    for (const [index, group] of type === 'service' ? entries('replicas') : []) {
      for (const field of isMap(group) ? Object.keys(group).filter((f) => SERVICE_WIDE.includes(f) || f === 'router') : []) {
        const unsupported = UNSUPPORTED.find((rule) => rule.kinds.includes('service') && rule.path.length === 1 && rule.path[0] === field);
        found.push([['replicas', index, field], unsupported?.message ?? `${field} per replica group is not supported: set it at the top level, where it applies to every group`, 'key']);
      }
    }
    for (const [index, fleet] of entries('fleets')) {
      if (typeof fleet === 'string' && fleet.includes('/')) found.push([['fleets', index], `"${fleet}" ${IMPORTED}`, 'value']);
    }
    for (const [index, selector] of entries('instances')) {
      if (isMap(selector) && typeof selector.fleet === 'string' && selector.fleet.includes('/')) found.push([['instances', index, 'fleet'], `"${selector.fleet}" ${IMPORTED}`, 'value']);
    }
  }
  if (typeof spec.gateway === 'string' && spec.gateway.includes('/')) found.push([['gateway'], `"${spec.gateway}" ${IMPORTED}`, 'value']);
  return found;
}

/** Fields dstack may come to take per replica group that are the service's alone here (a group takes count, scaling, commands, image, python, resources, spot_policy). */
const SERVICE_WIDE: readonly string[] = [
  'port', 'env', 'regions', 'backends', 'fleets', 'instance_types', 'max_price', 'volumes', 'files', 'repos', 'working_dir',
  'entrypoint', 'probes', 'model', 'registry_auth', 'privileged', 'shell', 'docker', 'retry', 'reservation', 'availability_zones',
];

function isMap(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function valueAt(spec: Record<string, unknown>, path: readonly string[]): { found: boolean; value: unknown } {
  let value: unknown = spec;
  for (const part of path) {
    if (value === null || typeof value !== 'object' || Array.isArray(value) || !Object.hasOwn(value, part)) return { found: false, value: undefined };
    value = (value as Record<string, unknown>)[part];
  }
  return { found: true, value };
}

/**
 * Refuses the dstack features this orchestrator lacks, each by name at its field, so that a dstack
 * configuration gets one message per missing feature instead of the errors that follow from it (a
 * service with replica groups has no top-level commands, say). Returns the spec without the fields
 * whose value asks for what happens anyway, or null when anything was refused: then nothing else is
 * worth checking. `known` are the top-level fields of the kind's schema, which a rule overrides only for
 * the values its `sameMeaning` does not take (a service's replicas as a list).
 */
export function refuseUnsupported(spec: Record<string, unknown>, type: SpecType, known: Record<string, unknown>, report: ReportIssue): Record<string, unknown> | null {
  const kept: Record<string, unknown> = { ...spec };
  let refused = false;
  for (const rule of UNSUPPORTED) {
    const knownField = rule.path.length === 1 && Object.hasOwn(known, rule.path[0]);
    if (!rule.kinds.includes(type) || (knownField && !rule.sameMeaning)) continue;
    const { found, value } = valueAt(spec, rule.path);
    if (!found) continue;
    if (rule.sameMeaning?.(value)) {
      if (rule.path.length === 1 && !knownField) delete kept[rule.path[0]];
      continue;
    }
    report([...rule.path], rule.message, 'key');
    refused = true;
  }
  for (const [path, message, at] of refusedItems(spec, type)) {
    report(path, message, at);
    refused = true;
  }
  if (Array.isArray(spec.backends)) {
    spec.backends.forEach((backend, index) => {
      if (typeof backend !== 'string' || !DSTACK_ONLY_BACKENDS.includes(backend.toLowerCase())) return;
      report(['backends', index], `the ${backend} backend is not supported: the backends here are gpucloud, local and kubernetes`, 'value');
      refused = true;
    });
  }
  return refused ? null : kept;
}

/**
 * A better message for a field that belongs to another kind (which kinds have it, and what it means there), or
 * under resources (a resources map whose lines lost their indentation).
 */
export function otherKindsHint(path: Path, field: string, type: SpecType, schemas: Record<SpecType, TObject>): string | null {
  if (path.length > 0) return null;
  if (Object.hasOwn(Resources.properties, field)) return `unknown field at the top level; ${field} belongs under resources: indent it there`;
  const owners = (Object.keys(schemas) as SpecType[]).filter((other) => other !== type && Object.hasOwn(schemas[other].properties, field));
  if (owners.length === 0) return null;
  const byMeaning = new Map<string, SpecType[]>();
  for (const owner of owners) {
    const description = (schemas[owner].properties[field] as { description?: unknown }).description;
    const meaning = typeof description === 'string' ? ` (${description.charAt(0).toLowerCase()}${description.slice(1)})` : '';
    byMeaning.set(meaning, [...(byMeaning.get(meaning) ?? []), owner]);
  }
  const places = [...byMeaning].map(([meaning, kinds]) => `${kinds.map((kind) => `a ${kind}`).join(' and ')}${meaning}`);
  return `unknown field for a ${type}; ${field} belongs to ${places.join(', and to ')}`;
}
