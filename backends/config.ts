import { Type, type Static } from '@sinclair/typebox';

/** One entry of a project's `backends:` list in the server's config.yml. */
export const GpucloudBackendConfig = Type.Object({
  type: Type.Literal('gpucloud'),
  api_url: Type.Optional(Type.String({ minLength: 1 })),
  creds: Type.Object({
    type: Type.Literal('api_key'),
    api_key: Type.String({ minLength: 1 }),
  }, { additionalProperties: false }),
}, { additionalProperties: false });
export type GpucloudBackendConfig = Static<typeof GpucloudBackendConfig>;

export const LocalBackendConfig = Type.Object({
  type: Type.Literal('local'),
  runtime: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('docker'), Type.Literal('process')])),
  /** How many instances may run on this machine at once. */
  instances: Type.Optional(Type.Integer({ minimum: 1 })),
}, { additionalProperties: false });
export type LocalBackendConfig = Static<typeof LocalBackendConfig>;

export const BackendConfig = Type.Union([GpucloudBackendConfig, LocalBackendConfig]);
export type BackendConfig = Static<typeof BackendConfig>;
