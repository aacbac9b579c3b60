import { Type, type Static } from '@sinclair/typebox';

export const BackendType = Type.Union([Type.Literal('gpucloud'), Type.Literal('local'), Type.Literal('kubernetes'), Type.Literal('ssh')]);
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
  spot: Type.Optional(Type.Boolean({ description: 'Spot capacity: cheaper, and the backend may interrupt it at any time' })),
});
export type Offer = Static<typeof Offer>;

/** How current one backend's offers are: when they were last fetched, and why the refreshes since have failed. */
export const BackendOffersState = Type.Object({
  backend: Type.String(),
  fetchedAt: Type.Union([Type.String({ description: 'ISO 8601' }), Type.Null()], { description: 'null: never listed' }),
  ageSeconds: Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()], { description: 'the last refresh\'s error, until a refresh succeeds' }),
});
export type BackendOffersState = Static<typeof BackendOffersState>;

/** The offers of some backends, cheapest first, with each backend's state and one line per backend that could not be asked. */
export const OfferListing = Type.Object({
  offers: Type.Array(Offer),
  backends: Type.Array(BackendOffersState),
  errors: Type.Array(Type.String()),
});
export type OfferListing = Static<typeof OfferListing>;

/** `$2.50`: in cents, or to the hundredth of a cent where a price has one (`$0.0125`), so that prices read alike everywhere. */
export function formatDollars(amount: number): string {
  const cents = amount.toFixed(2);
  return `$${Number(cents) === Number(amount.toFixed(4)) ? cents : amount.toFixed(4).replace(/0+$/, '')}`;
}
