import { parseDuration } from './duration.js';
import { parseCountRange, parseSize } from './quantity.js';
import { replicaGroupsOf } from './replica-groups.js';
import type { ModelRoute, RateLimitRoute } from './services.js';
import type { ServiceSpec } from './spec.js';

/** A probe with its defaults filled in and its durations in milliseconds. */
export interface ProbeSettings {
  url: string;
  method: string;
  headers: Array<{ name: string; value: string }>;
  body: string | undefined;
  timeoutMs: number;
  intervalMs: number;
  readyAfter: number;
  /** Any answer counts (the default probe of a service without probes and without a model: the port accepts connections). */
  anyAnswer: boolean;
}

export interface ScalingSettings {
  metric: 'rps' | 'inflight';
  target: number;
  windowSeconds: number;
  upDelayMs: number;
  downDelayMs: number;
}

/** A group of replicas as the autoscaler moves it: its count range and scaling; name null for a service without groups. */
export interface GroupSettings {
  name: string | null;
  replicas: { min: number; max: number };
  scaling: ScalingSettings | null;
}

/** Everything a service spec sets, with its defaults, in the units the gateway and the service controller use. */
export interface ServiceSettings {
  port: number;
  auth: boolean;
  stripPrefix: boolean;
  model: ModelRoute | null;
  /** Over all groups together. */
  replicas: { min: number; max: number };
  /** The service's own; null with replica groups, each of which has its own. */
  scaling: ScalingSettings | null;
  groups: GroupSettings[];
  probes: ProbeSettings[];
  maxBodyBytes: number;
  firstByteTimeoutMs: number;
  idleTimeoutMs: number;
  holdMs: number;
  startupTimeoutMs: number;
  drainTimeoutMs: number;
  gateway: string | false | null;
  https: boolean | 'auto';
  /** Longest prefix first: the first that matches a request's path is its limit. */
  rateLimits: RateLimitRoute[];
}

const ms = (value: string | number | undefined, fallback: string) => parseDuration(value ?? fallback) * 1000;

/** Reads a validated service spec; the spec's own checks have already refused anything these parsers would. */
export function serviceSettings(spec: ServiceSpec): ServiceSettings {
  const groups = replicaGroupsOf(spec).map(({ name, spec: group }) => groupSettings(name, group));
  const model: ModelRoute | null = spec.model === undefined ? null
    : typeof spec.model === 'string' ? { name: spec.model, format: 'openai', prefix: '/v1' }
      : { name: spec.model.name, format: 'openai', prefix: (spec.model.prefix ?? '/v1').replace(/\/+$/, '') };
  return {
    port: spec.port,
    auth: spec.auth ?? true,
    stripPrefix: spec.strip_prefix ?? true,
    model,
    replicas: { min: sum(groups.map((g) => g.replicas.min)), max: sum(groups.map((g) => g.replicas.max)) },
    scaling: Array.isArray(spec.replicas) ? null : groups[0]!.scaling,
    groups,
    probes: probesOf(spec, model),
    maxBodyBytes: parseSize(spec.max_body_size ?? '64MB') * 1024 * 1024,
    firstByteTimeoutMs: ms(spec.first_byte_timeout, '60s'),
    idleTimeoutMs: ms(spec.idle_timeout, '5m'),
    holdMs: ms(spec.cold_start_timeout, '5m'),
    startupTimeoutMs: ms(spec.startup_timeout, '10m'),
    drainTimeoutMs: ms(spec.drain_timeout, '1m'),
    gateway: spec.gateway ?? null,
    https: spec.https ?? 'auto',
    rateLimits: (spec.rate_limits ?? [])
      .map((limit) => ({
        prefix: limit.prefix ?? '/', key: limit.key ?? 'ip', header: limit.header?.toLowerCase() ?? null, rps: limit.rps, burst: limit.burst ?? 0,
      }))
      .sort((a, b) => b.prefix.length - a.prefix.length),
  };
}

function groupSettings(name: string | null, spec: ServiceSpec): GroupSettings {
  const replicas = parseCountRange(spec.replicas as string | number | undefined ?? 1, { least: 0, bounded: true, what: 'replica count' });
  return {
    name,
    replicas: { min: replicas.min ?? 0, max: replicas.max ?? replicas.min ?? 1 },
    scaling: spec.scaling ? {
      metric: spec.scaling.metric,
      target: spec.scaling.target,
      windowSeconds: parseDuration(spec.scaling.window ?? '1m'),
      upDelayMs: ms(spec.scaling.scale_up_delay, '5m'),
      downDelayMs: ms(spec.scaling.scale_down_delay, '10m'),
    } : null,
  };
}

function sum(values: number[]): number {
  return values.reduce((a, b) => a + b, 0);
}

/** The spec's probes; without any, a model service is probed on its models route and any other on its port. */
function probesOf(spec: ServiceSpec, model: ModelRoute | null): ProbeSettings[] {
  if (spec.probes && spec.probes.length > 0) {
    return spec.probes.map((probe) => ({
      url: probe.url ?? '/',
      method: (probe.method ?? 'get').toUpperCase(),
      headers: probe.headers ?? [],
      body: probe.body,
      timeoutMs: ms(probe.timeout, '10s'),
      intervalMs: ms(probe.interval, '15s'),
      readyAfter: probe.ready_after ?? 1,
      anyAnswer: false,
    }));
  }
  const base = { method: 'GET', headers: [], body: undefined, timeoutMs: 5000, intervalMs: 2000, readyAfter: 1 };
  return [model ? { ...base, url: `${model.prefix}/models`, anyAnswer: false } : { ...base, url: '/', anyAnswer: true }];
}

/** A service run's URL paths under the server: where users and OpenAI clients reach it. */
export function servicePaths(project: string, run: string, model: string | null): { path: string; modelPath: string | null } {
  return { path: `/proxy/services/${project}/${run}/`, modelPath: model === null ? null : `/proxy/models/${project}/v1/` };
}
