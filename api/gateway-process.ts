import { Type, type Static } from '@sinclair/typebox';
import { Role } from './objects.js';
import { ServiceRoute } from './services.js';

/** What a gateway process and its server say to each other, under `/api/gateway/`, with the gateway's own token. */

/** Where `orchestrator gateway-server` finds the token its server gave it. */
export const GATEWAY_TOKEN_VARIABLE = 'ORCHESTRATOR_GATEWAY_TOKEN';

/** What a gateway process needs to serve, from `GET /api/gateway/config`: its settings, routes, callers and certificates. */
export const GatewayConfig = Type.Object({
  gateway: Type.Object({
    id: Type.String(),
    name: Type.String(),
    project: Type.String(),
    projectId: Type.String(),
    /** The domain without `*.`: services are at `<run>.<base>`. */
    base: Type.String(),
    certificate: Type.Object({
      type: Type.Union([Type.Literal('lets-encrypt'), Type.Literal('manual'), Type.Literal('none')]),
      acmeServer: Type.String(),
      email: Type.Union([Type.String(), Type.Null()]),
      certFile: Type.Union([Type.String(), Type.Null()]),
      keyFile: Type.Union([Type.String(), Type.Null()]),
    }),
    httpsPort: Type.Integer(),
  }),
  routes: Type.Array(ServiceRoute),
  /** Everyone who has a token, by its SHA-256: their role in the project, null for those who are no member. */
  callers: Type.Array(Type.Object({ tokenHash: Type.String(), role: Type.Union([Role, Type.Null()]) })),
  /** The hostnames to get certificates for from the ACME server (certificate type lets-encrypt): every service that HTTPS is not off for. */
  hostnames: Type.Array(Type.String()),
  /** The certificates issued so far, with their keys. */
  certificates: Type.Array(Type.Object({ hostname: Type.String(), certificatePem: Type.String(), keyPem: Type.String() })),
  acmeAccountKeyPem: Type.Union([Type.String(), Type.Null()]),
});
export type GatewayConfig = Static<typeof GatewayConfig>;

/** One service's requests in one second, as a gateway process reports them for autoscaling. */
export const GatewayServiceSecond = Type.Object({
  runId: Type.String({ minLength: 1 }),
  second: Type.String({ minLength: 1, description: 'The second, as an ISO 8601 time' }),
  requests: Type.Integer({ minimum: 0 }),
  errors: Type.Integer({ minimum: 0 }),
  inflight: Type.Integer({ minimum: 0 }),
  latency: Type.Array(Type.Integer({ minimum: 0 })),
});
export const GatewayStatsReport = Type.Object({ seconds: Type.Array(GatewayServiceSecond, { maxItems: 10_000 }) }, { additionalProperties: false });
export type GatewayStatsReport = Static<typeof GatewayStatsReport>;

export const CertificateUpload = Type.Object({
  certificatePem: Type.String({ minLength: 1, maxLength: 64 * 1024 }),
  keyPem: Type.String({ minLength: 1, maxLength: 16 * 1024 }),
}, { additionalProperties: false });
export type CertificateUpload = Static<typeof CertificateUpload>;

export const CertificateFailure = Type.Object({ error: Type.String({ minLength: 1, maxLength: 4096 }) }, { additionalProperties: false });
export type CertificateFailure = Static<typeof CertificateFailure>;

export const AccountKeyUpload = Type.Object({ keyPem: Type.String({ minLength: 1, maxLength: 16 * 1024 }) }, { additionalProperties: false });
export type AccountKeyUpload = Static<typeof AccountKeyUpload>;
