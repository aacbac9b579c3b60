import { Type, type Static } from '@sinclair/typebox';

/** The wire format of the gpucloud REST API (docs/gpucloud-api.md), shared by the client and the emulator. */

export const GPU_MODELS = ['L4', 'H100', 'H200', 'RTXPRO6000'] as const;
export const GpuModel = Type.Union(GPU_MODELS.map((model) => Type.Literal(model)));
export type GpuModel = Static<typeof GpuModel>;

export const GpucloudOffer = Type.Object({
  id: Type.String(),
  gpu: Type.Object({
    model: Type.String(),
    memory_gb: Type.Integer({ minimum: 0 }),
    count: Type.Integer({ minimum: 0 }),
  }),
  vcpus: Type.Integer({ minimum: 1 }),
  memory_gb: Type.Integer({ minimum: 0 }),
  disk_gb: Type.Integer({ minimum: 0 }),
  region: Type.String(),
  price_per_hour: Type.Number({ minimum: 0 }),
  availability: Type.Union([Type.Literal('available'), Type.Literal('unavailable')]),
  spot: Type.Optional(Type.Boolean({ description: 'Spot capacity: cheaper, and interrupted when the cloud needs it back' })),
});
export type GpucloudOffer = Static<typeof GpucloudOffer>;

export const OfferList = Type.Object({ offers: Type.Array(GpucloudOffer) });
export type OfferList = Static<typeof OfferList>;

export const INSTANCE_STATUSES = ['provisioning', 'running', 'terminating', 'terminated', 'failed'] as const;
export const GpucloudInstanceStatus = Type.Union(INSTANCE_STATUSES.map((status) => Type.Literal(status)));
export type GpucloudInstanceStatus = Static<typeof GpucloudInstanceStatus>;

export const GpucloudInstance = Type.Object({
  id: Type.String(),
  name: Type.String(),
  client_token: Type.String(),
  offer_id: Type.String(),
  status: GpucloudInstanceStatus,
  status_reason: Type.Union([Type.String(), Type.Null()]),
  agent_url: Type.Union([Type.String(), Type.Null()]),
  region: Type.String(),
  gpu: GpucloudOffer.properties.gpu,
  price_per_hour: Type.Number({ minimum: 0 }),
  spot: Type.Optional(Type.Boolean()),
  /** True once the cloud has taken a spot instance back; it is then terminating or terminated. */
  interrupted: Type.Optional(Type.Boolean()),
  /** The cluster it was created in; absent for an instance outside clusters. */
  cluster_id: Type.Optional(Type.String()),
  /** Its address in its cluster's network, which the cluster's other instances reach it at; absent outside clusters. */
  internal_ip: Type.Optional(Type.String()),
  created_at: Type.String(),
  updated_at: Type.String(),
  /** When billing stopped: the termination was accepted, or the machine ended by itself; absent while it is billed. */
  billed_until: Type.Optional(Type.String()),
});
export type GpucloudInstance = Static<typeof GpucloudInstance>;

/** A placement group: machines of one GPU model in one region, on one network with a fast interconnect. */
export const GpucloudCluster = Type.Object({
  id: Type.String(),
  name: Type.String(),
  client_token: Type.String(),
  region: Type.String(),
  gpu_model: Type.String(),
  /** How many machines it must be able to hold; null: as many as its region holds. */
  size: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
  /** The network its instances' internal_ip addresses are in, such as 127.64.3.0/24. */
  network: Type.String(),
  created_at: Type.String(),
});
export type GpucloudCluster = Static<typeof GpucloudCluster>;

export const CreateClusterBody = Type.Object({
  /** Any offer of the model and region the cluster is for. */
  offer_id: Type.String({ minLength: 1, maxLength: 200 }),
  name: Type.String({ minLength: 1, maxLength: 200 }),
  client_token: Type.String({ minLength: 1, maxLength: 200 }),
  size: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 256 }), Type.Null()])),
}, { additionalProperties: false });
export type CreateClusterBody = Static<typeof CreateClusterBody>;

export const InstanceList = Type.Object({ instances: Type.Array(GpucloudInstance) });
export type InstanceList = Static<typeof InstanceList>;

/** What one instance has been billed: from its creation until its termination was accepted (or now). */
export const InstanceUsage = Type.Object({
  instance_id: Type.String(),
  name: Type.String(),
  price_per_hour: Type.Number({ minimum: 0 }),
  started_at: Type.String(),
  ended_at: Type.Union([Type.String(), Type.Null()]),
  billed_seconds: Type.Number({ minimum: 0 }),
  dollars: Type.Number({ minimum: 0 }),
});
export type InstanceUsage = Static<typeof InstanceUsage>;

export const UsageList = Type.Object({ usage: Type.Array(InstanceUsage), total_dollars: Type.Number({ minimum: 0 }) });
export type UsageList = Static<typeof UsageList>;

export const CreateInstanceBody = Type.Object({
  offer_id: Type.String({ minLength: 1, maxLength: 200 }),
  name: Type.String({ minLength: 1, maxLength: 200 }),
  client_token: Type.String({ minLength: 1, maxLength: 200 }),
  agent: Type.Object({ token: Type.String({ minLength: 16, maxLength: 512 }) }, { additionalProperties: false }),
  cluster_id: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })),
}, { additionalProperties: false });
export type CreateInstanceBody = Static<typeof CreateInstanceBody>;

export const ERROR_CODES = [
  'invalid_api_key', 'invalid_json', 'invalid_request', 'payload_too_large', 'not_found',
  'method_not_allowed', 'offer_not_found', 'instance_not_found', 'no_capacity',
  'idempotency_mismatch', 'instance_not_running', 'instance_not_spot', 'rate_limited', 'internal_error',
  'cluster_not_found', 'cluster_does_not_fit', 'cluster_mismatch', 'cluster_in_use',
] as const;
export type ErrorCode = typeof ERROR_CODES[number];

export const ErrorBody = Type.Object({
  error: Type.Object({ code: Type.String(), message: Type.String() }),
});
export type ErrorBody = Static<typeof ErrorBody>;

/** Emulator-only: faults to inject, each field optional; `no_capacity: []` clears that fault. */
export const FaultsPatch = Type.Object({
  no_capacity: Type.Optional(Type.Array(Type.Union([GpuModel, Type.Literal('*')]))),
  api_errors: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
  slow_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: 600_000 })),
  rate_limit: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
  kill_instances: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
  /** Spot instances to interrupt now. */
  interrupt_instances: Type.Optional(Type.Array(Type.String({ minLength: 1 }))),
  /** Interrupt every spot instance this long after it starts running (counted from now for those already running); null: never. */
  spot_interruption_after_ms: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 86_400_000 }), Type.Null()])),
  /** The utilisation, in percent, that every instance's GPUs report; null: idle (0). */
  gpu_utilization: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 100 }), Type.Null()])),
}, { additionalProperties: false });
export type FaultsPatch = Static<typeof FaultsPatch>;

export const FaultsState = Type.Object({
  no_capacity: Type.Array(Type.String()),
  api_errors: Type.Integer(),
  slow_ms: Type.Integer(),
  rate_limit: Type.Integer(),
  spot_interruption_after_ms: Type.Union([Type.Integer(), Type.Null()]),
  gpu_utilization: Type.Union([Type.Integer(), Type.Null()]),
});
export type FaultsState = Static<typeof FaultsState>;
