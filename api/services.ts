import { Type, type Static } from '@sinclair/typebox';

/** What services look like to the gateway and to users: replicas, routes and request statistics. */

/** A replica's place in its life: placed like a task, then probed, then in rotation until it drains. */
export const ReplicaState = Type.Union([
  Type.Literal('provisioning'), Type.Literal('starting'), Type.Literal('ready'),
  Type.Literal('draining'), Type.Literal('terminated'),
]);
export type ReplicaState = Static<typeof ReplicaState>;

export const Replica = Type.Object({
  replica: Type.Integer({ minimum: 0, description: 'The replica number: `ssh <run>-<n>` and `logs --replica n`' }),
  group: Type.Union([Type.String(), Type.Null()], { description: 'Its replica group (replicas as a list); null for a service without groups' }),
  generation: Type.Integer({ description: 'The service generation whose spec it runs' }),
  state: ReplicaState,
  statusMessage: Type.String(),
  instance: Type.Union([Type.String(), Type.Null()]),
  startedAt: Type.Union([Type.String(), Type.Null()]),
  readyAt: Type.Union([Type.String(), Type.Null()]),
});
export type Replica = Static<typeof Replica>;

/**
 * Why replicas of a generation stopped coming while others serve: `failing`, they kept ending (or never passed their
 * probes) before becoming ready; `unplaceable`, no fleet or offer can take one. A generation that was never ready
 * gets no more replicas after `failing`; the generation that serves is tried again, and `unplaceable` is always.
 */
export const RolloutStall = Type.Object({
  generation: Type.Integer(),
  reason: Type.Union([Type.Literal('failing'), Type.Literal('unplaceable')]),
  message: Type.String(),
});
export type RolloutStall = Static<typeof RolloutStall>;

/** A service's published form, on its run. */
export const ServiceInfo = Type.Object({
  /** How many replicas the service aims for now (the autoscaler moves it within the range). */
  desiredReplicas: Type.Integer({ minimum: 0 }),
  replicas: Type.Array(Replica),
  /** The last generation whose replicas all became ready: what `service rollback` puts back; null before any was. */
  stableGeneration: Type.Union([Type.Integer(), Type.Null()]),
  /** Set while replicas of a generation do not come up; the run's status message says what still serves. */
  stall: Type.Union([RolloutStall, Type.Null()]),
  /** Path of the service under the server's URL: `/proxy/services/<project>/<run>/`. */
  path: Type.String(),
  /** The model's name on `/proxy/models/<project>/`, when the service declares one. */
  model: Type.Union([Type.String(), Type.Null()]),
  /** The model endpoint's base path as an OpenAI client takes it, `/proxy/models/<project>/v1/`; null without a model. */
  modelPath: Type.Union([Type.String(), Type.Null()]),
  /** Where the service's gateway publishes it, `https://<run>.<domain>/`; null when no gateway does. */
  gatewayUrl: Type.Union([Type.String(), Type.Null()]),
  /** The gateway's OpenAI-compatible endpoint with the service's model, `https://gateway.<domain>/v1/`; null without a model or gateway. */
  gatewayModelUrl: Type.Union([Type.String(), Type.Null()]),
});
export type ServiceInfo = Static<typeof ServiceInfo>;

/** One ready replica as the gateway reaches it: through its instance's agent, never an address from a client. */
export const ReplicaRoute = Type.Object({
  /** The replica's run id, which is also its job id on the agent. */
  id: Type.String(),
  replica: Type.Integer(),
  /** The service's port as its own generation's spec gives it: an update's new port never reaches the old replicas. */
  port: Type.Integer(),
  agentUrl: Type.String(),
  agentToken: Type.String(),
});
export type ReplicaRoute = Static<typeof ReplicaRoute>;

export const ModelRoute = Type.Object({
  name: Type.String(),
  format: Type.Literal('openai'),
  /** Path prefix of the OpenAI routes in the service, `/v1` unless the spec says otherwise. */
  prefix: Type.String(),
});
export type ModelRoute = Static<typeof ModelRoute>;

/** A rate limit with its defaults filled in: a token bucket of `burst + 1` tokens per key, refilled at `rps`. */
export const RateLimitRoute = Type.Object({
  prefix: Type.String(),
  key: Type.Union([Type.Literal('ip'), Type.Literal('header')]),
  /** The header whose value keys the bucket, lowercase (key: header). */
  header: Type.Union([Type.String(), Type.Null()]),
  rps: Type.Number(),
  burst: Type.Integer(),
});
export type RateLimitRoute = Static<typeof RateLimitRoute>;

/** A service the gateway publishes, with what it needs to forward a request and to hold one. */
export const ServiceRoute = Type.Object({
  runId: Type.String(),
  projectId: Type.String(),
  project: Type.String(),
  run: Type.String(),
  auth: Type.Boolean(),
  stripPrefix: Type.Boolean(),
  model: Type.Union([ModelRoute, Type.Null()]),
  maxBodyBytes: Type.Integer(),
  firstByteTimeoutMs: Type.Integer(),
  idleTimeoutMs: Type.Integer(),
  /** How long a request waits for a replica when none is ready (scale from zero, or one starting). */
  holdMs: Type.Integer(),
  /** The gateway that publishes it: a name, null for the project's default gateway, false for none. */
  gateway: Type.Union([Type.String(), Type.Literal(false), Type.Null()]),
  https: Type.Union([Type.Boolean(), Type.Literal('auto')]),
  rateLimits: Type.Array(RateLimitRoute),
  replicas: Type.Array(ReplicaRoute),
  /** When the service was submitted, in Unix seconds: the `created` of its model in a model list. */
  createdAt: Type.Integer(),
});
export type ServiceRoute = Static<typeof ServiceRoute>;

/** Upper bounds (ms) of the latency histogram the gateway keeps per service and second; the last bucket is everything slower. */
export const LATENCY_BUCKETS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 30_000, 60_000] as const;

/** What a span of a service's requests adds up to: over the stats window, or over one step of its series. */
const RequestFigures = {
  requests: Type.Integer(),
  requestsPerSecond: Type.Number(),
  errors: Type.Integer(),
  errorRate: Type.Number(),
  p50Ms: Type.Union([Type.Number(), Type.Null()]),
  p99Ms: Type.Union([Type.Number(), Type.Null()]),
};

/** Requests of one service over recent minutes, as `orchestrator service stats` shows them. */
export const ServiceStats = Type.Object({
  run: Type.String(),
  windowSeconds: Type.Integer(),
  ...RequestFigures,
  inflight: Type.Integer({ description: 'The most requests in flight at once during the window, held ones included' }),
  inflightNow: Type.Integer({ description: 'Requests in flight now (during this second or the one before), held ones included' }),
  readyReplicas: Type.Integer(),
  desiredReplicas: Type.Integer(),
});
export type ServiceStats = Static<typeof ServiceStats>;

/** A service's request figures second by second, or `stepSeconds` by `stepSeconds`: `GET .../services/<run>/stats/series`. */
export const ServiceStatsSeries = Type.Object({
  run: Type.String(),
  windowSeconds: Type.Integer(),
  stepSeconds: Type.Integer(),
  /** Oldest first, one per step of the window, steps without requests included. */
  points: Type.Array(Type.Object({
    at: Type.String({ description: 'ISO 8601: the start of the step' }),
    ...RequestFigures,
  })),
});
export type ServiceStatsSeries = Static<typeof ServiceStatsSeries>;
