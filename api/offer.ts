import { Type, type Static } from '@sinclair/typebox';

export const BackendType = Type.Union([Type.Literal('gpucloud'), Type.Literal('local')]);
export type BackendType = Static<typeof BackendType>;

/** The GPUs of one machine: `count` cards of one model (count 0 and name '' for a machine without GPUs). */
export const GpuInfo = Type.Object({
  name: Type.String(),
  memoryMib: Type.Integer({ minimum: 0 }),
  count: Type.Integer({ minimum: 0 }),
});
export type GpuInfo = Static<typeof GpuInfo>;

export const Offer = Type.Object({
  backend: BackendType,
  offerId: Type.String(),
  gpu: GpuInfo,
  cpus: Type.Integer({ minimum: 1 }),
  memoryMib: Type.Integer({ minimum: 0 }),
  diskMib: Type.Integer({ minimum: 0 }),
  region: Type.String(),
  pricePerHour: Type.Number({ minimum: 0 }),
  availability: Type.Union([Type.Literal('available'), Type.Literal('unavailable')]),
});
export type Offer = Static<typeof Offer>;
