import { X509Certificate } from 'node:crypto';
import Router from '@koa/router';
import { Value } from '@sinclair/typebox/value';
import type { Context, Next } from 'koa';
import type { TSchema, Static } from '@sinclair/typebox';
import { GATEWAY_MODELS_NAME, runOfHost } from '../../api/domains.js';
import {
  AccountKeyUpload, CertificateFailure, CertificateUpload, GatewayStatsReport, type GatewayConfig,
} from '../../api/gateway-process.js';
import { LETS_ENCRYPT_DIRECTORY } from '../../api/gateways.js';
import type { ServiceRoute } from '../../api/services.js';
import { CHANNELS } from '../../store/channels.js';
import {
  forgetCertificates, gatewayByTokenHash, gatewaySeen, listCertificates, projectCallers, recordCertificateFailure, saveCertificate,
  setAcmeAccountKey, type GatewayRecord,
} from '../../store/gateways.js';
import { getProjectById, hashToken } from '../../store/projects.js';
import { projectRunIds } from '../../store/runs.js';
import { recordServiceSeconds } from '../../store/service-stats.js';
import { loadRoutingTable } from '../../store/services.js';
import type { SecretBox } from '../../store/secrets.js';
import type { ServerContext } from '../context.js';
import { badRequest, HttpError, notFound, readJsonObject } from '../http-errors.js';

interface GatewayState {
  gateway: GatewayRecord;
}

/** Names a gateway's sealed values, so that one copied to another gateway or hostname does not open. */
const keyName = (gateway: GatewayRecord, what: string) => `gateway:${gateway.id}:${what}`;

/** Whether the gateway publishes the service: the one it names, or, naming none, the project's default gateway. */
function publishes(gateway: GatewayRecord, route: ServiceRoute): boolean {
  return route.projectId === gateway.projectId && (route.gateway === gateway.name || (route.gateway === null && gateway.isDefault));
}

/**
 * The hostnames that need a certificate from the ACME server: every published service that HTTPS is not off for, and
 * the model endpoint `gateway.<domain>` while a published service declares a model.
 */
function certificateHostnames(gateway: GatewayRecord, routes: ServiceRoute[]): string[] {
  if ((gateway.spec.certificate?.type ?? 'lets-encrypt') !== 'lets-encrypt') return [];
  const services = routes.filter((route) => route.https !== false).map((route) => `${route.run}.${gateway.base}`);
  return routes.some((route) => route.model !== null) ? [...services, `${GATEWAY_MODELS_NAME}.${gateway.base}`] : services;
}

/** A gateway process calls with its own token, which its server gave it when it started it. */
function authenticateGateway(server: ServerContext) {
  return async (ctx: Context, next: Next) => {
    const token = /^Bearer\s+(\S+)$/i.exec(ctx.get('authorization'))?.[1];
    if (!token) throw new HttpError(401, 'unauthorized', 'missing or malformed Authorization header; expected "Bearer <gateway token>"');
    const gateway = await gatewayByTokenHash(server.db, hashToken(token));
    if (!gateway) throw new HttpError(401, 'unauthorized', 'invalid gateway token: the gateway was deleted, or restarted with another token');
    (ctx.state as GatewayState).gateway = gateway;
    await gatewaySeen(server.db, gateway.id);
    await next();
  };
}

async function checkedBody<T extends TSchema>(ctx: Context, schema: T): Promise<Static<T>> {
  const body = await readJsonObject(ctx);
  if (!Value.Check(schema, body)) {
    const first = [...Value.Errors(schema, body)][0];
    throw badRequest(`${first?.path || 'body'}: ${first?.message ?? 'invalid'}`);
  }
  return body as Static<T>;
}

function hostnameOf(ctx: Context, gateway: GatewayRecord): string {
  const hostname = String(ctx.params.hostname).toLowerCase();
  if (runOfHost(hostname, gateway.base) === null) throw notFound(`${hostname} is not under ${gateway.spec.domain}`);
  return hostname;
}

async function configOf(gateway: GatewayRecord, server: ServerContext, secrets: SecretBox): Promise<GatewayConfig> {
  const { db } = server;
  const project = await getProjectById(db, gateway.projectId);
  const routes = (await loadRoutingTable(db)).filter((route) => publishes(gateway, route));
  const hostnames = certificateHostnames(gateway, routes);
  await forgetCertificates(db, gateway.id, hostnames);
  const certificates = (await listCertificates(db, gateway.id)).filter((c) => c.certificate !== null && c.privateKey !== null);
  const certificate = gateway.spec.certificate;
  return {
    gateway: {
      id: gateway.id, name: gateway.name, project: project.name, projectId: project.id, base: gateway.base,
      certificate: {
        type: certificate?.type ?? 'lets-encrypt', acmeServer: certificate?.acme_server ?? LETS_ENCRYPT_DIRECTORY, email: certificate?.email ?? null,
        certFile: certificate?.cert_file ?? null, keyFile: certificate?.key_file ?? null,
      },
      httpsPort: gateway.spec.https_port ?? 443,
    },
    routes,
    callers: await projectCallers(db, project.id),
    hostnames,
    certificates: certificates.map((c) => ({
      hostname: c.hostname, certificatePem: c.certificate!, keyPem: secrets.open(project.id, keyName(gateway, c.hostname), c.privateKey!),
    })),
    acmeAccountKeyPem: gateway.acmeAccountKey === null ? null : secrets.open(project.id, keyName(gateway, 'acme-account'), gateway.acmeAccountKey),
  };
}

/**
 * `/api/gateway/...`: what gateway processes ask of their server, each with its own token: the routing table and
 * certificates (`config`, polled), its request counts for autoscaling, certificates it got, and failures.
 */
export function gatewayApiRoutes(server: ServerContext): Router {
  const { db, secrets } = server;
  const router = new Router({ prefix: '/api/gateway' });
  router.use(authenticateGateway(server));
  const gatewayOf = (ctx: Context) => (ctx.state as GatewayState).gateway;

  router.get('/config', async (ctx) => {
    ctx.body = await configOf(gatewayOf(ctx), server, secrets);
  });

  router.post('/stats', async (ctx) => {
    const gateway = gatewayOf(ctx);
    const report = await checkedBody(ctx, GatewayStatsReport);
    const ids = [...new Set(report.seconds.map((s) => s.runId))];
    const own = await projectRunIds(db, gateway.projectId, ids);
    const seconds = report.seconds.filter((s) => own.has(s.runId) && !Number.isNaN(Date.parse(s.second)))
      .map((s) => ({ ...s, second: new Date(s.second) }));
    await recordServiceSeconds(db, `gateway:${gateway.id}`, seconds);
    ctx.status = 204;
  });

  router.post('/wake', async (ctx) => {
    await db.notify(CHANNELS.runs);
    ctx.status = 204;
  });

  router.put('/certificates/:hostname', async (ctx) => {
    const gateway = gatewayOf(ctx);
    const hostname = hostnameOf(ctx, gateway);
    const upload = await checkedBody(ctx, CertificateUpload);
    let leaf: X509Certificate;
    try {
      leaf = new X509Certificate(upload.certificatePem);
    } catch (error) {
      throw badRequest(`certificatePem: not a PEM certificate: ${(error as Error).message}`);
    }
    if (leaf.checkHost(hostname) === undefined) throw badRequest(`certificatePem: the certificate is not for ${hostname}`);
    await saveCertificate(db, gateway.id, hostname, upload.certificatePem, secrets.seal(gateway.projectId, keyName(gateway, hostname), upload.keyPem),
      new Date(leaf.validFrom), new Date(leaf.validTo));
    ctx.status = 204;
  });

  router.post('/certificates/:hostname/failure', async (ctx) => {
    const gateway = gatewayOf(ctx);
    const failure = await checkedBody(ctx, CertificateFailure);
    await recordCertificateFailure(db, gateway.id, hostnameOf(ctx, gateway), failure.error);
    ctx.status = 204;
  });

  router.put('/account-key', async (ctx) => {
    const gateway = gatewayOf(ctx);
    const upload = await checkedBody(ctx, AccountKeyUpload);
    await setAcmeAccountKey(db, gateway.id, secrets.seal(gateway.projectId, keyName(gateway, 'acme-account'), upload.keyPem));
    ctx.status = 204;
  });
  return router;
}
