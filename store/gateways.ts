import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import { GATEWAY_MODELS_NAME, wildcardBase } from '../api/domains.js';
import type { GatewayConfig } from '../api/gateway-process.js';
import type { Gateway, GatewayCertificate, GatewaySpec, GatewayStatus } from '../api/gateways.js';
import type { Queryable, Row } from './db.js';

/** The gateway process a server started on its own machine (backend local), to find it again after a restart. */
export interface LocalGatewayProcess {
  /** The machine it runs on: only a server there can see its pid. */
  host: string;
  pid: number;
  /** Tells the process from a later one that reused its pid (Linux /proc). */
  startTime: string | null;
  /** The generation of the spec it was started with: a new one restarts it. */
  generation: number;
}

/** The instance a gateway with backend gpucloud rents, and the gateway-server job its agent runs there. */
export interface GatewayInstance {
  backend: 'gpucloud';
  /** The create request's idempotency key, written before the request: a server that crashed in between finds the instance again by it. */
  key: string;
  offerId: string;
  pricePerHour: number;
  /** The agent's token, given to the backend at create. */
  agentToken: string;
  /** Null until the backend answered the create request. */
  backendInstanceId: string | null;
  agentUrl: string | null;
  /** The agent's job that runs `orchestrator gateway-server`, and the spec generation it was started with; null before the first. */
  jobId: string | null;
  generation: number;
}

export interface GatewayRecord {
  id: string;
  projectId: string;
  name: string;
  spec: GatewaySpec;
  /** The domain without `*.`. */
  base: string;
  isDefault: boolean;
  generation: number;
  status: GatewayStatus;
  statusMessage: string;
  process: LocalGatewayProcess | null;
  instance: GatewayInstance | null;
  address: string | null;
  lastSeenAt: Date | null;
  /** The ACME account's private key, sealed with the server key. */
  acmeAccountKey: string | null;
  createdAt: Date;
}

export const toGateway = (r: Row): GatewayRecord => ({
  id: r.id, projectId: r.project_id, name: r.name, spec: r.spec, base: r.domain, isDefault: r.is_default, generation: r.generation,
  status: r.status, statusMessage: r.status_message,
  process: r.process?.backend === undefined ? r.process : null, instance: r.process?.backend === 'gpucloud' ? r.process : null, address: r.address, lastSeenAt: r.last_seen_at,
  acmeAccountKey: r.acme_account_key, createdAt: r.created_at,
});

export interface CertificateRecord {
  hostname: string;
  certificate: string | null;
  /** Sealed with the server key. */
  privateKey: string | null;
  notBefore: Date | null;
  notAfter: Date | null;
  error: string | null;
}

const toCertificate = (r: Row): CertificateRecord => ({
  hostname: r.hostname, certificate: r.certificate, privateKey: r.private_key, notBefore: r.not_before, notAfter: r.not_after, error: r.error,
});

export function certificateView(c: CertificateRecord): GatewayCertificate {
  const valid = c.certificate !== null && c.notAfter !== null && c.notAfter.getTime() > Date.now();
  return {
    hostname: c.hostname,
    state: c.error !== null ? 'failed' : valid ? 'valid' : 'pending',
    notAfter: c.notAfter?.toISOString() ?? null,
    error: c.error,
  };
}

export function gatewayView(g: GatewayRecord, project: string, certificates: CertificateRecord[]): Gateway {
  return {
    id: g.id, project, name: g.name, domain: g.spec.domain, default: g.isDefault, backend: g.spec.backend ?? 'local',
    status: g.status, statusMessage: g.statusMessage, address: g.address,
    instance: g.instance && { id: g.instance.backendInstanceId, offer: g.instance.offerId, pricePerHour: g.instance.pricePerHour }, lastSeenAt: g.lastSeenAt?.toISOString() ?? null,
    certificates: certificates.map(certificateView), spec: g.spec as unknown as Record<string, unknown>, createdAt: g.createdAt.toISOString(),
  };
}

/** The gateway a service is published on, if any: the one it names, or the project's default. */
export function gatewayOfService(gateways: GatewayRecord[], spec: { gateway?: string | false }): GatewayRecord | undefined {
  if (spec.gateway === false) return undefined;
  return gateways.find((g) => g.status !== 'deleting' && g.status !== 'deleted' && (spec.gateway === undefined ? g.isDefault : g.name === spec.gateway));
}

/** The service's address on the gateway: HTTPS unless the service or the gateway leaves it on HTTP. */
export function gatewayUrl(gateway: GatewayRecord, run: string, https: boolean | 'auto' | undefined): string {
  const secure = https !== false && (gateway.spec.certificate?.type ?? 'lets-encrypt') !== 'none';
  const port = secure ? gateway.spec.https_port ?? 443 : gateway.spec.http_port ?? 80;
  return `${secure ? 'https' : 'http'}://${run}.${gateway.base}${port === (secure ? 443 : 80) ? '' : `:${port}`}/`;
}

/** The gateway's OpenAI-compatible endpoint, at `gateway.<domain>` with the scheme its services get by default. */
export function gatewayModelsUrl(gateway: GatewayRecord): string {
  return `${gatewayUrl(gateway, GATEWAY_MODELS_NAME, undefined)}v1/`;
}

export async function getLiveGateway(db: Queryable, projectId: string, name: string): Promise<GatewayRecord | null> {
  const rows = await db.query(`SELECT * FROM gateways WHERE project_id = $1 AND name = $2 AND status <> 'deleted'`, [projectId, name]);
  return rows[0] ? toGateway(rows[0]) : null;
}

export async function getGatewayById(db: Queryable, id: string): Promise<GatewayRecord | null> {
  const rows = await db.query('SELECT * FROM gateways WHERE id = $1', [id]);
  return rows[0] ? toGateway(rows[0]) : null;
}

export async function listGateways(db: Queryable, projectId: string): Promise<GatewayRecord[]> {
  const rows = await db.query(`SELECT * FROM gateways WHERE project_id = $1 AND status <> 'deleted' ORDER BY created_at`, [projectId]);
  return rows.map(toGateway);
}

/** The live gateway, of any project, that publishes under this domain base. */
export async function gatewayOfDomain(db: Queryable, base: string): Promise<GatewayRecord | null> {
  const rows = await db.query(`SELECT * FROM gateways WHERE domain = $1 AND status NOT IN ('deleting', 'deleted')`, [base]);
  return rows[0] ? toGateway(rows[0]) : null;
}

export type GatewayAction = 'create' | 'update' | 'unchanged';

/**
 * Inserts a gateway, or a new generation of the live one with that name when its spec changed (its process is
 * then restarted by the gateway controller). A default gateway becomes the project's only default.
 */
export async function applyGateway(db: Queryable, projectId: string, spec: GatewaySpec): Promise<{ gateway: GatewayRecord; action: GatewayAction }> {
  const existing = await getLiveGateway(db, projectId, spec.name);
  const base = wildcardBase(spec.domain);
  const isDefault = spec.default === true;
  let row: Row;
  let action: GatewayAction;
  if (!existing) {
    [row] = await db.query(
      `INSERT INTO gateways (id, project_id, name, spec, domain, is_default, status, status_message)
       VALUES ($1, $2, $3, $4::jsonb, $5, $6, 'starting', 'waiting for the gateway controller') RETURNING *`,
      [randomUUID(), projectId, spec.name, spec, base, isDefault]);
    action = 'create';
  } else if (isDeepStrictEqual(existing.spec, spec)) {
    return { gateway: existing, action: 'unchanged' };
  } else {
    [row] = await db.query(
      `UPDATE gateways SET spec = $2::jsonb, domain = $3, is_default = $4, generation = generation + 1, updated_at = now(), next_reconcile_at = now()
       WHERE id = $1 RETURNING *`, [existing.id, spec, base, isDefault]);
    action = 'update';
  }
  if (isDefault) await db.query(`UPDATE gateways SET is_default = false WHERE project_id = $1 AND id <> $2 AND is_default`, [projectId, row!.id]);
  return { gateway: toGateway(row!), action };
}

export async function requestGatewayDeletion(db: Queryable, id: string): Promise<void> {
  await db.query(`UPDATE gateways SET status = 'deleting', status_message = 'deletion requested', is_default = false, next_reconcile_at = now(), updated_at = now() WHERE id = $1`, [id]);
}

export async function gatewayByTokenHash(db: Queryable, tokenHash: string): Promise<GatewayRecord | null> {
  const rows = await db.query(`SELECT * FROM gateways WHERE token_hash = $1 AND status NOT IN ('deleting', 'deleted')`, [tokenHash]);
  return rows[0] ? toGateway(rows[0]) : null;
}

/** The gateway process called: it is running, and a gateway that was starting or unreachable is so no more. */
export async function gatewaySeen(db: Queryable, id: string): Promise<void> {
  await db.query(
    `UPDATE gateways SET last_seen_at = now(),
       status = CASE WHEN status IN ('starting', 'unreachable') THEN 'running' ELSE status END,
       status_message = CASE WHEN status IN ('starting', 'unreachable') THEN '' ELSE status_message END
     WHERE id = $1`, [id]);
}

/** Gives the gateway a new token before its process starts with it: the process a former token belonged to is refused from now on. */
export async function setGatewayToken(db: Queryable, id: string, owner: string, tokenHash: string, message: string): Promise<boolean> {
  const rows = await db.query(
    `UPDATE gateways SET token_hash = $3, status = 'starting', status_message = $4, updated_at = now() WHERE id = $1 AND lease_owner = $2 RETURNING id`,
    [id, owner, tokenHash, message]);
  return rows.length > 0;
}

/** Records the process or instance that serves the gateway now (null: none), where it listens, and its status. */
export async function setGatewayProcess(db: Queryable, id: string, owner: string, process: LocalGatewayProcess | GatewayInstance | null, address: string | null, status: GatewayStatus, message: string): Promise<boolean> {
  const rows = await db.query(
    `UPDATE gateways SET process = $3::jsonb, address = $4, status = $5, status_message = $6, updated_at = now(),
       token_hash = CASE WHEN $5 = 'deleted' THEN NULL ELSE token_hash END
     WHERE id = $1 AND lease_owner = $2 RETURNING id`,
    [id, owner, process, address, status, message]);
  return rows.length > 0;
}

/** A gateway whose process has not called for a while: it may be down, or unable to reach the server. */
export async function setGatewayUnreachable(db: Queryable, id: string, owner: string, message: string): Promise<void> {
  await db.query(`UPDATE gateways SET status = 'unreachable', status_message = $3 WHERE id = $1 AND lease_owner = $2 AND status = 'running'`, [id, owner, message]);
}

export async function setAcmeAccountKey(db: Queryable, id: string, sealed: string): Promise<void> {
  await db.query('UPDATE gateways SET acme_account_key = $2 WHERE id = $1 AND acme_account_key IS NULL', [id, sealed]);
}

export async function listCertificates(db: Queryable, gatewayId: string): Promise<CertificateRecord[]> {
  const rows = await db.query('SELECT * FROM gateway_certificates WHERE gateway_id = $1 ORDER BY hostname', [gatewayId]);
  return rows.map(toCertificate);
}

export async function saveCertificate(db: Queryable, gatewayId: string, hostname: string, certificate: string, sealedKey: string, notBefore: Date, notAfter: Date): Promise<void> {
  await db.query(
    `INSERT INTO gateway_certificates (gateway_id, hostname, certificate, private_key, not_before, not_after, error)
     VALUES ($1, $2, $3, $4, $5, $6, NULL)
     ON CONFLICT (gateway_id, hostname) DO UPDATE SET certificate = EXCLUDED.certificate, private_key = EXCLUDED.private_key,
       not_before = EXCLUDED.not_before, not_after = EXCLUDED.not_after, error = NULL, updated_at = now()`,
    [gatewayId, hostname, certificate, sealedKey, notBefore, notAfter]);
}

/** A failed issuance: the reason shows in `gateway list`; a certificate issued before stays in use until it expires. */
export async function recordCertificateFailure(db: Queryable, gatewayId: string, hostname: string, error: string): Promise<void> {
  await db.query(
    `INSERT INTO gateway_certificates (gateway_id, hostname, error) VALUES ($1, $2, $3)
     ON CONFLICT (gateway_id, hostname) DO UPDATE SET error = EXCLUDED.error, updated_at = now()`,
    [gatewayId, hostname, error]);
}

/** Certificates of hostnames the gateway no longer serves. */
export async function forgetCertificates(db: Queryable, gatewayId: string, keep: string[]): Promise<void> {
  await db.query('DELETE FROM gateway_certificates WHERE gateway_id = $1 AND NOT (hostname = ANY($2::text[]))', [gatewayId, keep]);
}

/** Every user with a token, by its hash, with their role in the project (a global admin is admin everywhere); null for no member. */
export async function projectCallers(db: Queryable, projectId: string): Promise<GatewayConfig['callers']> {
  const rows = await db.query(
    `SELECT u.token_hash, CASE WHEN u.global_role = 'admin' THEN 'admin' ELSE m.role END AS role
     FROM users u LEFT JOIN memberships m ON m.user_id = u.id AND m.project_id = $1 ORDER BY u.token_hash`, [projectId]);
  return rows.map((r) => ({ tokenHash: r.token_hash, role: r.role ?? null }));
}
