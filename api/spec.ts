import { Type, type Static, type TObject } from '@sinclair/typebox';
import { BackendType } from './offer.js';
import { SshConfig } from './ssh-fleet.js';

/**
 * Checks beyond JSON Schema that a field needs, run by api/validate.ts. The key travels in the schema
 * itself (`x-check`) because TypeBox copies schemas when composing them, so identity cannot carry it.
 */
export type CheckName =
  | 'name' | 'duration' | 'duration-or-off' | 'positive-duration' | 'size' | 'size-range'
  | 'gpu' | 'gpu-models' | 'gpu-vendor' | 'gpu-count' | 'cpu-range' | 'disk' | 'nodes' | 'replicas' | 'python' | 'env'
  | 'port-mapping' | 'file-mapping' | 'volume-mount' | 'absolute-path' | 'url-path' | 'repo' | 'cron'
  | 'wildcard-domain' | 'http-url' | 'rate-limit';

/** `x-expected` is the phrase error messages use for what the field takes. */
function checked(check: CheckName, expected: string, description: string): Record<string, unknown> {
  return { 'x-check': check, 'x-expected': expected, description };
}

const DURATION_TEXT = 'a duration such as 30s, 5m, 2h, 3d, 1w, 1h30m, or a number of seconds';

export const Name = Type.String({
  ...checked('name', 'a name of 1-40 lowercase letters, digits and hyphens', 'A lowercase DNS label of 1-40 characters that starts with a letter'),
  minLength: 1, maxLength: 40, pattern: '^[a-z]([-a-z0-9]*[a-z0-9])?$',
});

export const Priority = Type.Integer({
  minimum: 0, maximum: 100, default: 0,
  description: 'Scheduling priority from 0 to 100; higher runs are started first when capacity is short',
});

const DURATION_EXPECTED: Record<'duration' | 'duration-or-off' | 'positive-duration', string> = {
  'duration': DURATION_TEXT,
  'duration-or-off': `${DURATION_TEXT}, or off`,
  'positive-duration': `${DURATION_TEXT}, longer than 0`,
};

function duration(check: keyof typeof DURATION_EXPECTED, description: string, fallback?: string) {
  return Type.Union([Type.String(), Type.Integer()], {
    ...checked(check, DURATION_EXPECTED[check], description),
    ...(fallback === undefined ? {} : { default: fallback }),
  });
}

export const Duration = duration('duration', 'A duration such as 30s, 5m, 2h, 3d, 1w or 1h30m; a bare number is seconds');
/** How long an instance above its fleet's minimum may stay idle when the fleet's idle_duration does not say. */
export const DEFAULT_IDLE_DURATION = '5m';

const durationOrOff = (description: string, fallback?: string) =>
  duration('duration-or-off', `${description}: a duration such as 30m or 1h30m, a number of seconds, or off`, fallback);

export const Size = Type.Union([Type.String(), Type.Number()], checked('size', 'a size such as 512MB, 24GB or 1TB', 'A size such as 512MB, 24GB or 1TB (binary units); a bare number is GB'));
export const SizeRange = Type.Union([Type.String(), Type.Number()], checked('size-range', 'a size such as 24GB or a range such as 24GB.., ..80GB or 24GB..80GB', 'A size (exactly) or a range of sizes: 24GB, 24GB.., ..80GB, 24GB..80GB'));

export const GpuModels = Type.Union([Type.String(), Type.Array(Type.String())], checked('gpu-models', 'a GPU model such as H100, a comma-separated list, or a list of models', 'A GPU model (L4, H100, H200, RTXPRO6000), several separated by commas, or a list'));
export const GpuCount = Type.Union([Type.String(), Type.Integer()], checked('gpu-count', 'a number of GPUs such as 2 or a range such as 1..8', 'A number of GPUs (exactly) or a range such as 1..8 or 0..8'));

export const GpuObject = Type.Object({
  vendor: Type.Optional(Type.String(checked('gpu-vendor', 'one of nvidia, amd, intel, tenstorrent', 'The vendor: nvidia, amd, intel or tenstorrent; alone, any model of that vendor'))),
  name: Type.Optional(GpuModels),
  memory: Type.Optional(SizeRange),
  count: Type.Optional(GpuCount),
}, { additionalProperties: false, ...checked('gpu', 'a map with vendor, name, memory and count', 'GPUs by vendor, model, memory per card and count') });

export const Gpu = Type.Union([
  Type.String(checked('gpu', 'a GPU spec such as H100:2', 'model[:memory][:count] in any order')),
  Type.Integer({ minimum: 0 }),
  GpuObject,
], {
  'x-expected': 'a GPU spec such as "H100:2" or "L4:24GB", a number of GPUs, or a map with name, memory and count',
  description: 'GPUs per machine: a spec such as H100, H100:2, L4:24GB, H100,H200:8, 24GB..:1..2 (parts in any order), a number of GPUs, or {name, memory, count}',
});

export const Resources = Type.Object({
  gpu: Type.Optional(Gpu),
  cpu: Type.Optional(Type.Union([Type.String(), Type.Integer()], checked('cpu-range', 'a number of CPUs such as 4 or a range such as 2.., optionally after x86:', 'A number of CPUs (exactly) or a range such as 2.. or 4..16, optionally with the architecture: x86:8..'))),
  memory: Type.Optional(SizeRange),
  disk: Type.Optional(Type.Union([Type.String(), Type.Number()], checked('disk', 'a size such as 100GB or a range such as 100GB..', 'Disk size: a size (exactly) or a range such as 100GB..'))),
  shm_size: Type.Optional(Size),
}, { additionalProperties: false, description: 'What each machine must have' });
export type Resources = Static<typeof Resources>;

export const Env = Type.Record(Type.String(), Type.String(), checked(
  'env',
  'a list of NAME or NAME=value, or a map of names to values',
  'Environment variables: a map of names to values, or a list of NAME=value; NAME alone takes its value from the environment of the user who applies the configuration',
));

export const Port = Type.Integer({ minimum: 1, maximum: 65535 });
export const PortMapping = Type.Union([Port, Type.String(checked('port-mapping', 'a mapping such as "8080:80"', 'local:container'))], {
  'x-expected': 'a port from 1 to 65535 or a mapping such as "8080:80"',
  description: 'A container port to forward, or "local:container"',
});

export const Python = Type.String(checked('python', 'a Python version such as "3.12"', 'The Python of the virtual environment the commands run in, in the default image (as in dstack): 3.9 to 3.13; cannot be combined with image'));
export const Image = Type.String({ minLength: 1, description: 'Docker image to run in' });
export const Commands = Type.Array(Type.String(), { minItems: 1, description: 'Shell commands, run in order in one shell' });
export const RegistryAuth = Type.Object({
  username: Type.String({ minLength: 1 }),
  password: Type.String({ minLength: 1, 'x-secret': true }),
}, { additionalProperties: false, description: 'Credentials for a private image registry' });

export const RetryEvent = Type.Union([Type.Literal('no-capacity'), Type.Literal('interruption'), Type.Literal('error')]);
export const Retry = Type.Union([
  Type.Boolean(),
  Type.Object({
    on_events: Type.Optional(Type.Array(RetryEvent, { minItems: 1, uniqueItems: true, description: 'Events that trigger a retry; all three when left out' })),
    duration: Type.Optional(duration('duration', 'How long to keep retrying', '1h')),
  }, { additionalProperties: false }),
], { 'x-expected': 'true, false, or a map with on_events and duration', description: 'Whether and for how long to resubmit the run after no-capacity, interruption or error; true retries on all three for 1h' });

export const UtilizationPolicy = Type.Object({
  min_gpu_utilization: Type.Integer({ minimum: 0, maximum: 100, description: 'Percent' }),
  time_window: duration('positive-duration', 'How long utilization must stay low'),
}, { additionalProperties: false, description: 'Stop the run when every GPU stays below min_gpu_utilization for time_window' });

/** What to do where the image already holds files at the repo's path, as dstack's `if_exists`; left out, the repo is put over them. */
export const RepoIfExists = Type.Union([Type.Literal('error'), Type.Literal('skip')], {
  description: 'Where the image already has files at the repo\'s path: error fails the run, skip leaves them and puts no repo there',
});

export const Repo = Type.Union([
  Type.String({ minLength: 1, ...checked('repo', 'a folder, "folder:path" or a git URL', 'A folder (".", "..:/workflow/parent") or a git URL') }),
  Type.Object({
    url: Type.Optional(Type.String({ minLength: 1 })),
    local_path: Type.Optional(Type.String({ minLength: 1 })),
    branch: Type.Optional(Type.String({ minLength: 1 })),
    hash: Type.Optional(Type.String({ minLength: 1 })),
    path: Type.Optional(Type.String({ minLength: 1, description: 'Where the repo lands in the container' })),
    if_exists: Type.Optional(RepoIfExists),
  }, { additionalProperties: false, ...checked('repo', 'a map with url or local_path', 'A repo given by url or local_path') }),
], { 'x-expected': 'a local path or git URL, or a map with url or local_path', description: 'A local directory or git URL to make available to the run' });

export const Volume = Type.Union([
  Type.String(checked('volume-mount', 'a mount such as "/mnt/cache:/root/.cache"', 'instance_path:path')),
  Type.Object({
    instance_path: Type.String(checked('absolute-path', 'an absolute path', 'Directory on the instance')),
    path: Type.String(checked('absolute-path', 'an absolute path', 'Directory in the container')),
    optional: Type.Optional(Type.Boolean({ default: false, description: 'Run even where the instance path is missing' })),
  }, { additionalProperties: false }),
], { 'x-expected': 'a mount such as "/mnt/cache:/root/.cache" or a map with instance_path and path', description: 'A directory of the instance mounted into the container' });

export const Model = Type.Union([
  Type.String({ minLength: 1 }),
  Type.Object({
    name: Type.String({ minLength: 1 }),
    type: Type.Optional(Type.Literal('chat', { default: 'chat' })),
    format: Type.Optional(Type.Literal('openai', { default: 'openai' })),
    prefix: Type.Optional(Type.String({ ...checked('url-path', 'a path starting with /', 'Path of the OpenAI routes in the service'), default: '/v1' })),
  }, { additionalProperties: false }),
], { 'x-expected': 'a model name, or a map with name, format and prefix', description: 'Publish the service on the OpenAI-compatible model endpoint under this model name' });

export const Scaling = Type.Object({
  metric: Type.Union([Type.Literal('rps'), Type.Literal('inflight')], { description: 'rps: requests per second; inflight: requests in flight at once' }),
  target: Type.Number({ exclusiveMinimum: 0, description: 'The metric per replica to aim for' }),
  window: Type.Optional(duration('positive-duration', 'The span the metric is averaged over (rps) or its peak taken from (inflight)', '1m')),
  scale_up_delay: Type.Optional(duration('duration', 'Time since the last change before a replica is added', '5m')),
  scale_down_delay: Type.Optional(duration('duration', 'Time since the last change before a replica is removed', '10m')),
}, { additionalProperties: false, description: 'Autoscaling within the replicas range: ceil(metric / target) replicas' });

export const Probe = Type.Object({
  type: Type.Literal('http'),
  url: Type.Optional(Type.String({ ...checked('url-path', 'a path starting with /', 'Path to request'), default: '/' })),
  method: Type.Optional(Type.Union(['get', 'post', 'put', 'delete', 'patch', 'head'].map((m) => Type.Literal(m)), { default: 'get' })),
  headers: Type.Optional(Type.Array(Type.Object({ name: Type.String({ minLength: 1 }), value: Type.String() }, { additionalProperties: false }))),
  body: Type.Optional(Type.String()),
  timeout: Type.Optional(duration('positive-duration', 'Time to wait for an answer', '10s')),
  interval: Type.Optional(duration('positive-duration', 'Time between probes', '15s')),
  ready_after: Type.Optional(Type.Integer({ minimum: 1, default: 1, description: 'Successes in a row before the replica counts as ready' })),
}, { additionalProperties: false, description: 'A readiness check of each replica' });

const Cron = Type.String(checked('cron', 'a cron expression such as "*/5 * * * *" (5 fields, or 6 with seconds first)', 'A cron expression, in UTC'));
export const Schedule = Type.Object({
  cron: Type.Union([Cron, Type.Array(Cron, { minItems: 1 })], {
    'x-expected': 'a cron expression such as "*/5 * * * *", or a list of them',
    description: 'When to submit a run, in UTC: a cron expression (5 fields, or 6 with seconds first) or a list of them',
  }),
}, { additionalProperties: false, description: 'Submit a run (<name>-<n>) at each time the cron expressions name (UTC); a time that falls while the previous run is still active is skipped' });

/** One of dstack's forms of an instance in a run's `instances`: exactly one of name, hostname, or fleet with instance (spec-rules.ts checks). */
export const InstanceSelector = Type.Object({
  name: Type.Optional(Type.String({ minLength: 1, description: 'The instance\'s name, such as my-fleet-3' })),
  hostname: Type.Optional(Type.String({ minLength: 1, description: 'An SSH host\'s hostname or IP address, or an instance\'s internal address' })),
  fleet: Type.Optional(Name),
  instance: Type.Optional(Type.Integer({ minimum: 0, description: 'The instance\'s number in its fleet: 3 for my-fleet-3' })),
}, { additionalProperties: false, description: 'An existing instance: by name, by hostname, or by fleet and number' });
export type InstanceSelector = Static<typeof InstanceSelector>;

export const RateLimit = Type.Object({
  prefix: Type.Optional(Type.String({ ...checked('url-path', 'a path starting with /', 'The requests it applies to: those whose path starts with it; the longest matching prefix wins'), default: '/' })),
  key: Type.Optional(Type.Union([Type.Literal('ip'), Type.Literal('header')], { default: 'ip', description: 'ip: one bucket per client address; header: one per value of header' })),
  header: Type.Optional(Type.String({ minLength: 1, pattern: '^[!#$%&\'*+.^_`|~0-9A-Za-z-]+$', 'x-expected': 'an HTTP header name such as X-Api-Key', description: 'The header whose value keys the bucket (key: header)' })),
  rps: Type.Number({ exclusiveMinimum: 0, description: 'Requests per second each key may make, on average' }),
  burst: Type.Optional(Type.Integer({ minimum: 0, default: 0, description: 'Requests a key may make at once above the rate; further ones get 429 with Retry-After' })),
}, { additionalProperties: false, ...checked('rate-limit', 'a map with prefix, key, header, rps and burst', 'A token bucket per client address or header value') });

export const SpotPolicy = Type.Union([Type.Literal('spot'), Type.Literal('on-demand'), Type.Literal('auto')], {
  default: 'on-demand', description: 'spot: only interruptible capacity at its lower price; on-demand: never it; auto: spot where offered, else on-demand',
});

export const MaxPrice = Type.Number({
  exclusiveMinimum: 0, 'x-expected': 'a price in dollars per hour such as 2.5',
  description: 'The most an instance may cost, in dollars per hour (per replica of a service, per node of a task); dearer offers are not taken',
});

/** What every run kind (task, service, dev environment) takes: where and how its one container runs. */
const runCommon = {
  name: Type.Optional(Name),
  priority: Type.Optional(Priority),
  resources: Type.Optional(Resources),
  env: Type.Optional(Env),
  image: Type.Optional(Image),
  registry_auth: Type.Optional(RegistryAuth),
  python: Type.Optional(Python),
  files: Type.Optional(Type.Array(Type.String(checked('file-mapping', 'a path or a mapping such as "data:/workflow/data"', 'path, or local:remote')), { description: 'Local files and directories to copy into the container' })),
  repos: Type.Optional(Type.Array(Repo)),
  working_dir: Type.Optional(Type.String({ minLength: 1, description: 'Directory the commands start in' })),
  volumes: Type.Optional(Type.Array(Volume)),
  privileged: Type.Optional(Type.Boolean({ default: false, description: 'Run the container in privileged mode' })),
  nvcc: Type.Optional(Type.Boolean({ default: false, description: 'The CUDA compiler in the run, as in dstack: the default image\'s devel variant; cannot be combined with image' })),
  docker: Type.Optional(Type.Boolean({ default: false, description: 'A Docker daemon in the run, as in dstack: its Docker-in-Docker image, privileged, dockerd started before the commands; cannot be combined with image or python' })),
  entrypoint: Type.Optional(Type.String({ minLength: 1, description: 'The container entrypoint the commands are passed to, instead of the shell' })),
  shell: Type.Optional(Type.String({ pattern: '^(sh|bash|/.+)$', 'x-expected': 'sh, bash, or an absolute path such as /usr/bin/zsh', description: 'The shell that runs the commands: sh, bash, or an absolute path' })),
  max_duration: Type.Optional(durationOrOff('Stop the run after this long')),
  stop_duration: Type.Optional(durationOrOff('How long a stopping run may take to exit before it is killed', '10s')),
  retry: Type.Optional(Retry),
  utilization_policy: Type.Optional(UtilizationPolicy),
  spot_policy: Type.Optional(SpotPolicy),
  max_price: Type.Optional(MaxPrice),
  backends: Type.Optional(Type.Array(BackendType, { minItems: 1, uniqueItems: true, description: 'Backends the run may be placed on; all when left out' })),
  fleets: Type.Optional(Type.Array(Name, { minItems: 1, uniqueItems: true, description: 'Fleets the run may be placed on; all that fit when left out' })),
  schedule: Type.Optional(Schedule),
  instances: Type.Optional(Type.Array(Type.Union([Type.String({ minLength: 1 }), InstanceSelector]), {
    minItems: 1, 'x-expected': 'a list of instance names, or maps with name, hostname, or fleet and instance',
    description: 'Existing instances the run may be placed on (an instance name, or {name}, {hostname} or {fleet, instance}); none is provisioned for it',
  })),
};

/** dstack's `nodes: {min, target, max}` where target differs from min: apply provisions target instances, and the fleet then keeps min. */
export const FleetNodesTarget = Type.Object({
  min: Type.Integer({ minimum: 0, default: 0, description: 'Instances the fleet always keeps' }),
  target: Type.Integer({ minimum: 0, description: 'Instances apply provisions when the fleet is created or changed; those above min are released once idle for idle_duration' }),
  max: Type.Optional(Type.Integer({ minimum: 0, description: 'Instances the fleet may have at most' })),
}, { additionalProperties: false, description: 'A node count with a target to provision on apply' });
export type FleetNodesTarget = Static<typeof FleetNodesTarget>;

export const FleetSpec = Type.Object({
  type: Type.Literal('fleet'),
  name: Name,
  nodes: Type.Optional(Type.Union([Type.String(), Type.Integer(), FleetNodesTarget], checked('nodes', 'a number of nodes such as 2, a range such as 0..2, or a map with min, target and max', 'Instances the fleet keeps: n (exactly), min..max, or {min, target, max}'))),
  idle_duration: Type.Optional(durationOrOff('How long an instance may stay idle above the minimum before it is released', DEFAULT_IDLE_DURATION)),
  backends: Type.Optional(Type.Array(BackendType, { minItems: 1, uniqueItems: true, description: 'Backends to provision from; all configured ones when left out' })),
  resources: Type.Optional(Resources),
  max_price: Type.Optional(MaxPrice),
  spot_policy: Type.Optional(SpotPolicy),
  env: Type.Optional(Env),
  placement: Type.Optional(Type.Union([Type.Literal('any'), Type.Literal('cluster')], {
    default: 'any', description: 'cluster: every instance in one region, on one network with a fast interconnect, for multi-node tasks; any: wherever the cheapest offer is',
  })),
  blocks: Type.Optional(Type.Union([Type.Literal('auto'), Type.Integer({ minimum: 1, maximum: 64 })], {
    default: 1, 'x-expected': 'auto or a number of blocks from 1 to 64',
    description: 'Split each instance into this many equal blocks of its GPUs, CPUs and memory, so that several runs share it; auto: one block per GPU',
  })),
  ssh_config: Type.Optional(SshConfig),
}, { additionalProperties: false, description: 'A pool of instances that runs are placed on' });
export type FleetSpec = Static<typeof FleetSpec>;

export const DevEnvironmentSpec = Type.Object({
  type: Type.Literal('dev-environment'),
  ...runCommon,
  ide: Type.Optional(Type.Union([Type.Literal('vscode'), Type.Literal('cursor'), Type.Literal('windsurf')], { description: 'Desktop IDE that apply gives a link for; left out, the environment is reached with ssh alone' })),
  init: Type.Optional(Type.Array(Type.String(), { description: 'Shell commands run once, in order in one shell, before the environment is ready; it then stays up until stopped' })),
  ports: Type.Optional(Type.Array(PortMapping)),
  inactivity_duration: Type.Optional(durationOrOff('Stop after this long with no SSH connection open (an IDE and attach hold one)')),
}, { additionalProperties: false, description: 'A machine to work on through an IDE' });
export type DevEnvironmentSpec = Static<typeof DevEnvironmentSpec>;

export const TaskSpec = Type.Object({
  type: Type.Literal('task'),
  ...runCommon,
  commands: Type.Optional(Commands),
  ports: Type.Optional(Type.Array(PortMapping)),
  nodes: Type.Optional(Type.Integer({
    minimum: 1, default: 1,
    description: 'Instances of one fleet the task runs on together, one job on each, all placed at once; the task is done when every node exits 0',
  })),
  startup_order: Type.Optional(Type.Union([Type.Literal('any'), Type.Literal('master-first'), Type.Literal('workers-first')], {
    default: 'any', 'x-expected': 'any, master-first or workers-first',
    description: 'Which jobs of a multi-node task start first: all at once, node 0 (the master) before the others, or the others before node 0',
  })),
  stop_criteria: Type.Optional(Type.Union([Type.Literal('all-done'), Type.Literal('master-done')], {
    default: 'all-done', 'x-expected': 'all-done or master-done',
    description: 'When a multi-node task is done: once every node exits 0, or once node 0 (the master) does, the others being stopped then',
  })),
}, { additionalProperties: false, description: 'A batch job that runs its commands to completion' });
export type TaskSpec = Static<typeof TaskSpec>;

const ReplicaCount = Type.Union([Type.String(), Type.Integer()], {
  ...checked('replicas', 'a number of replicas such as 2 or a range such as 0..4', 'Replicas: n (exactly) or min..max with scaling'),
});

/** One group of a service's replicas: its own count and scaling, and what its replicas run where it differs from the service. */
export const ReplicaGroup = Type.Object({
  name: Type.Optional(Type.String({
    ...checked('name', 'a name of 1-40 lowercase letters, digits and hyphens', 'The group\'s name, shown with each of its replicas; its position (0, 1, ...) when left out'),
    minLength: 1, maxLength: 40, pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$',
  })),
  count: ReplicaCount,
  scaling: Type.Optional(Scaling),
  commands: Type.Optional(Commands),
  image: Type.Optional(Image),
  python: Type.Optional(Python),
  resources: Type.Optional(Resources),
  spot_policy: Type.Optional(SpotPolicy),
}, { additionalProperties: false, description: 'A group of replicas: count (n or min..max with scaling), and commands, image or python, resources and spot_policy in place of the service\'s' });
export type ReplicaGroup = Static<typeof ReplicaGroup>;

export const ServiceSpec = Type.Object({
  type: Type.Literal('service'),
  ...runCommon,
  commands: Type.Optional(Commands),
  port: Type.Integer({ minimum: 1, maximum: 65535, description: 'Port the commands listen on' }),
  model: Type.Optional(Model),
  replicas: Type.Optional(Type.Union([ReplicaCount, Type.Array(ReplicaGroup, { minItems: 1 })], {
    'x-expected': 'a number of replicas such as 2, a range such as 0..4, or a list of replica groups',
    description: 'Replicas: n (exactly), min..max with scaling, or a list of replica groups, each with its own count, commands and resources', default: 1,
  })),
  scaling: Type.Optional(Scaling),
  auth: Type.Optional(Type.Boolean({ default: true, description: 'Require a token to call the service' })),
  strip_prefix: Type.Optional(Type.Boolean({ default: true, description: 'Remove /proxy/services/<project>/<run> from the path the service sees' })),
  probes: Type.Optional(Type.Array(Probe)),
  max_body_size: Type.Optional(Type.Union([Type.String(), Type.Number()], { ...checked('size', 'a size such as 64MB', 'Largest request body the proxy passes on; larger ones get 413'), default: '64MB' })),
  first_byte_timeout: Type.Optional(duration('positive-duration', 'How long the proxy waits for the start of an answer', '60s')),
  idle_timeout: Type.Optional(duration('positive-duration', 'How long an answer may pause between bytes (a stream may last longer in all)', '5m')),
  cold_start_timeout: Type.Optional(duration('duration', 'How long a request waits for a replica when none is ready (scale from zero), before 503', '5m')),
  startup_timeout: Type.Optional(duration('positive-duration', 'How long a replica may take to become ready before it is replaced', '10m')),
  drain_timeout: Type.Optional(duration('duration', 'How long a replica taken out of rotation keeps serving requests in flight before it stops', '1m')),
  gateway: Type.Optional(Type.Union([Name, Type.Literal(false)], {
    'x-expected': 'a gateway name, or false', description: 'The gateway that publishes the service at https://<run>.<domain>/: the project\'s default gateway when left out; false for none',
  })),
  https: Type.Optional(Type.Union([Type.Boolean(), Type.Literal('auto')], {
    'x-expected': 'true, false or auto', default: 'auto',
    description: 'On the gateway: true redirects HTTP to HTTPS once the certificate is issued (the gateway must issue certificates); false serves HTTP only; auto is true when the gateway issues certificates',
  })),
  rate_limits: Type.Optional(Type.Array(RateLimit, { description: 'Request rate limits, per client address or header value; a request over its limit gets 429 with Retry-After' })),
}, { additionalProperties: false, description: 'A long-running server published behind the proxy' });
export type ServiceSpec = Static<typeof ServiceSpec>;

export const RunSpec = Type.Union([TaskSpec, ServiceSpec, DevEnvironmentSpec]);
export type RunSpec = Static<typeof RunSpec>;

export const AnySpec = Type.Union([FleetSpec, TaskSpec, ServiceSpec, DevEnvironmentSpec]);
export type AnySpec = Static<typeof AnySpec>;

export type SpecType = AnySpec['type'];

/** The schema of each kind, keyed by the `type` field that selects it. */
export const SPEC_SCHEMAS: Record<SpecType, TObject> = {
  'fleet': FleetSpec,
  'dev-environment': DevEnvironmentSpec,
  'task': TaskSpec,
  'service': ServiceSpec,
};
export const SPEC_TYPES = Object.keys(SPEC_SCHEMAS) as SpecType[];
