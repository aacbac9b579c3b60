import { Type, type Static } from '@sinclair/typebox';
import { Name, Port } from './spec.js';
import type { ReportIssue } from './issue-place.js';

/** Let's Encrypt's production directory: what `certificate.type: lets-encrypt` uses unless `acme_server` names another. */
export const LETS_ENCRYPT_DIRECTORY = 'https://acme-v02.api.letsencrypt.org/directory';

export const GatewayCertificateSpec = Type.Object({
  type: Type.Union([Type.Literal('lets-encrypt'), Type.Literal('manual'), Type.Literal('none')], {
    default: 'lets-encrypt',
    description: 'lets-encrypt: a certificate per service from an ACME server (HTTP-01); manual: one certificate from cert_file and key_file; none: HTTP only',
  }),
  acme_server: Type.Optional(Type.String({
    'x-check': 'http-url', 'x-expected': 'an http:// or https:// URL of an ACME directory',
    description: `The ACME directory (lets-encrypt only); Let's Encrypt's production directory when left out`,
  })),
  email: Type.Optional(Type.String({ minLength: 3, pattern: '^[^@\\s]+@[^@\\s]+$', 'x-expected': 'an email address', description: 'Contact address given to the ACME server for expiry notices (lets-encrypt only)' })),
  cert_file: Type.Optional(Type.String({ 'x-check': 'absolute-path', 'x-expected': 'an absolute path', description: 'PEM certificate chain on the gateway\'s machine, for every service of the domain (manual only)' })),
  key_file: Type.Optional(Type.String({ 'x-check': 'absolute-path', 'x-expected': 'an absolute path', description: 'PEM private key on the gateway\'s machine (manual only)' })),
}, { additionalProperties: false, description: 'Where the gateway\'s TLS certificates come from' });
export type GatewayCertificateSpec = Static<typeof GatewayCertificateSpec>;

export const GatewayBackend = Type.Union([Type.Literal('local'), Type.Literal('gpucloud')], {
  default: 'local', description: 'local: a process on the server\'s machine, started and supervised by the server; gpucloud: the cheapest machine without GPUs rented from the project\'s gpucloud backend, its agent running the gateway',
});
export type GatewayBackend = Static<typeof GatewayBackend>;

export const GatewaySpec = Type.Object({
  type: Type.Literal('gateway'),
  name: Name,
  domain: Type.String({
    'x-check': 'wildcard-domain', 'x-expected': 'a wildcard domain such as "*.ml.example.com"',
    description: 'A wildcard domain whose DNS record points at the gateway; each service is published at <run>.<domain without *.>',
  }),
  default: Type.Optional(Type.Boolean({ default: false, description: 'Publish the project\'s services that name no gateway here; applying a default gateway makes it the only one' })),
  backend: Type.Optional(GatewayBackend),
  certificate: Type.Optional(GatewayCertificateSpec),
  public_ip: Type.Optional(Type.Boolean({ default: true, description: 'Listen on every address of the machine (true) or on 127.0.0.1 only (false): the server\'s machine (local) or the rented instance (gpucloud)' })),
  http_port: Type.Optional({ ...Port, default: 80, description: 'Port of plain HTTP: redirects to HTTPS and answers ACME HTTP-01 challenges (which come to port 80)' }),
  https_port: Type.Optional({ ...Port, default: 443, description: 'Port of HTTPS' }),
}, { additionalProperties: false, description: 'A process that publishes the project\'s services at https://<run>.<domain>/ with TLS and rate limits' });
export type GatewaySpec = Static<typeof GatewaySpec>;

/** The fields of `certificate` that belong to each type. */
const CERTIFICATE_FIELDS: Record<GatewayCertificateSpec['type'], readonly string[]> = {
  'lets-encrypt': ['acme_server', 'email'],
  'manual': ['cert_file', 'key_file'],
  'none': [],
};

/** Rules that tie a gateway's fields together, checked after each field on its own. */
export function checkGatewayRules(spec: Record<string, unknown>, report: ReportIssue): void {
  const http = spec.http_port ?? 80;
  if (http === (spec.https_port ?? 443)) report(['https_port'], `must differ from http_port (${String(http)})`, 'value');
  const certificate = spec.certificate as Record<string, unknown> | undefined;
  if (!certificate) return;
  const type = (certificate.type ?? 'lets-encrypt') as GatewayCertificateSpec['type'];
  const allowed = CERTIFICATE_FIELDS[type] ?? [];
  for (const field of Object.values(CERTIFICATE_FIELDS).flat()) {
    if (certificate[field] !== undefined && !allowed.includes(field)) report(['certificate', field], `not used with type ${type}; it belongs to type ${type === 'manual' ? 'lets-encrypt' : 'manual'}`, 'key');
  }
  if (type === 'manual') {
    for (const field of ['cert_file', 'key_file']) {
      if (certificate[field] === undefined) report(['certificate', field], 'required field is missing; type manual reads the certificate and its key from files on the gateway\'s machine', 'parent');
    }
  }
}

/** What a gateway is doing: started by its server and polling it, or not. */
export const GatewayStatus = Type.Union([
  Type.Literal('starting'), Type.Literal('running'), Type.Literal('unreachable'), Type.Literal('failed'),
  Type.Literal('deleting'), Type.Literal('deleted'),
]);
export type GatewayStatus = Static<typeof GatewayStatus>;

/** One hostname's certificate as `gateway list` shows it: never the key. */
export const GatewayCertificate = Type.Object({
  hostname: Type.String(),
  state: Type.Union([Type.Literal('valid'), Type.Literal('pending'), Type.Literal('failed')]),
  notAfter: Type.Union([Type.String(), Type.Null()]),
  /** Why the last issuance failed; the service is served over HTTP meanwhile. */
  error: Type.Union([Type.String(), Type.Null()]),
});
export type GatewayCertificate = Static<typeof GatewayCertificate>;

export const Gateway = Type.Object({
  id: Type.String(),
  project: Type.String(),
  name: Type.String(),
  domain: Type.String(),
  default: Type.Boolean(),
  backend: GatewayBackend,
  status: GatewayStatus,
  statusMessage: Type.String(),
  /** Where it listens: `http://host:port https://host:port`, once started. */
  address: Type.Union([Type.String(), Type.Null()]),
  /** The instance a gpucloud gateway rents (its id at the backend once created), and what it costs; null for backend local. */
  instance: Type.Union([Type.Object({ id: Type.Union([Type.String(), Type.Null()]), offer: Type.String(), pricePerHour: Type.Number() }), Type.Null()]),
  lastSeenAt: Type.Union([Type.String(), Type.Null()]),
  certificates: Type.Array(GatewayCertificate),
  spec: Type.Record(Type.String(), Type.Unknown()),
  createdAt: Type.String(),
});
export type Gateway = Static<typeof Gateway>;
