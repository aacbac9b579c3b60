import type { IncomingMessage } from 'node:http';
import { GATEWAY_MODELS_NAME, runOfHost } from '../api/domains.js';
import type { ServiceRoute } from '../api/services.js';
import { admit, type CallerAccess } from './access.js';
import { GatewayError } from './errors.js';
import type { Exchange } from './proxy-core.js';
import type { RoutingTable } from './routing-table.js';

/** Which project's services a gateway publishes, under which domain, and which of them are its own. */
export interface HostDomain {
  project: string;
  /** The domain without `*.`: services are at `<run>.<base>`. */
  base: string;
  publishes(route: ServiceRoute): boolean;
}

/** The service a Host header names under the gateway's domain, if the gateway publishes it. */
export function hostRoute(table: RoutingTable, domain: HostDomain, host: string | undefined): ServiceRoute | undefined {
  const run = runOfHost(host, domain.base);
  const route = run === null || run === GATEWAY_MODELS_NAME ? undefined : table.service(domain.project, run);
  return route && domain.publishes(route) ? route : undefined;
}

/** Whether a Host header names the gateway's model endpoint, `gateway.<domain>`. */
export function isModelsHost(domain: HostDomain, host: string | undefined): boolean {
  return runOfHost(host, domain.base) === GATEWAY_MODELS_NAME;
}

/**
 * Where a request to `<run>.<domain>` goes: that run's service, after its own authentication. The service sees
 * the path as the client sent it, with no prefix to strip.
 */
export async function hostExchange(access: CallerAccess, table: RoutingTable, domain: HostDomain, req: IncomingMessage): Promise<Exchange> {
  const host = req.headers.host;
  const route = hostRoute(table, domain, host);
  if (!route) throw new GatewayError(404, 'not_found', `no service is published at ${host ?? 'this address'}`);
  await admit(access, route, req);
  const path = req.url?.startsWith('/') ? req.url : '/';
  return { route, path, servicePath: path.replace(/\?.*$/, ''), errorShape: 'api' };
}
