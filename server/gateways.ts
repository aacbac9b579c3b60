import { GATEWAY_MODELS_NAME, wildcardBase } from '../api/domains.js';
import type { GatewaySpec } from '../api/gateways.js';
import type { ServiceSpec } from '../api/spec.js';
import type { Queryable } from '../store/db.js';
import { recordEvent } from '../store/events.js';
import { applyGateway, gatewayOfDomain, gatewayOfService, getLiveGateway, listGateways, type GatewayAction, type GatewayRecord } from '../store/gateways.js';
import type { ProjectRecord } from '../store/projects.js';
import { HttpError, invalidSpec } from './http-errors.js';

export interface WrittenGateway {
  kind: 'gateway';
  gateway: GatewayRecord;
  action: GatewayAction;
}

/**
 * Writes a gateway's new generation (or the gateway) and its event; a domain another gateway serves, or another backend,
 * is a conflict, and a backend the project lacks the user's mistake.
 */
export async function writeGateway(q: Queryable, project: ProjectRecord, spec: GatewaySpec): Promise<WrittenGateway> {
  const other = await gatewayOfDomain(q, wildcardBase(spec.domain));
  if (other && !(other.projectId === project.id && other.name === spec.name)) {
    throw new HttpError(409, 'domain_in_use', `${spec.domain} is already served by gateway ${other.name}${other.projectId === project.id ? '' : ' of another project'}; a domain has one gateway`);
  }
  const configured = project.backends.map((b) => b.type);
  if (spec.backend === 'gpucloud' && !configured.includes('gpucloud')) {
    throw invalidSpec(`backend: gpucloud is not configured for project ${project.name}, so no instance can be rented to run gateway ${spec.name}; configured: ${configured.join(', ') || 'none'}; backend local runs it on the server's machine`);
  }
  const existing = await getLiveGateway(q, project.id, spec.name);
  const [was, now] = [existing?.spec.backend ?? 'local', spec.backend ?? 'local'];
  if (existing && was !== now) {
    throw new HttpError(409, 'backend_change', `gateway ${spec.name} runs on backend ${was}; a gateway keeps its backend: delete it and apply it again with backend ${now}`);
  }
  const { gateway, action } = await applyGateway(q, project.id, spec);
  if (action !== 'unchanged') {
    await recordEvent(q, {
      projectId: project.id, objectKind: 'gateway', objectId: gateway.id, objectName: gateway.name,
      reason: action === 'create' ? 'Created' : 'Updated', message: `generation ${gateway.generation}: ${spec.domain}${gateway.isDefault ? ', default' : ''}`,
    });
  }
  return { kind: 'gateway', gateway, action };
}

/**
 * A service names a gateway that exists in its project (or none, or takes the default), and asks for `https: true`
 * only where that gateway issues certificates. Gateways of the same apply are written before, so they count.
 */
export async function checkServiceGateway(q: Queryable, project: ProjectRecord, spec: ServiceSpec): Promise<void> {
  if (spec.gateway === false) {
    if (spec.https === true) throw invalidSpec('https: true needs a gateway, and gateway is false; the server\'s own proxy serves the service with the server\'s scheme');
    return;
  }
  const gateways = await listGateways(q, project.id);
  const gateway = gatewayOfService(gateways, spec);
  if (spec.gateway !== undefined && !gateway) {
    const names = gateways.filter((g) => g.status !== 'deleting').map((g) => g.name);
    throw invalidSpec(`gateway: project ${project.name} has no gateway ${spec.gateway}; gateways: ${names.join(', ') || 'none'} (apply one with type: gateway)`);
  }
  if (gateway && spec.name === GATEWAY_MODELS_NAME) {
    throw invalidSpec(`name: ${GATEWAY_MODELS_NAME}.${gateway.base} is gateway ${gateway.name}'s model endpoint, so a service it publishes cannot be named ${GATEWAY_MODELS_NAME}; choose another name, or set gateway: false`);
  }
  if (spec.https !== true) return;
  if (!gateway) throw invalidSpec(`https: true needs a gateway, and project ${project.name} has no default gateway; name one with gateway: NAME`);
  if ((gateway.spec.certificate?.type ?? 'lets-encrypt') === 'none') {
    throw invalidSpec(`https: true needs certificates, and gateway ${gateway.name} has certificate type none; use https: auto, or give the gateway certificates`);
  }
}
