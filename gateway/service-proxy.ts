import type { IncomingMessage } from 'node:http';
import { isDnsLabel } from '../api/names.js';
import { admit, type CallerAccess } from './access.js';
import { GatewayError } from './errors.js';
import { then, type MaybePromise } from './maybe-async.js';
import type { Exchange } from './proxy-core.js';
import type { RoutingTable } from './routing-table.js';

export const SERVICES_PREFIX = '/proxy/services/';

/**
 * `/proxy/services/<project>/<run><path>?<query>`, read from the raw request line: the names must be
 * DNS labels as written, so no encoding (`%2e`, `%2f`, `%00`) can make them name anything else.
 */
const SERVICE_URL = /^\/proxy\/services\/([^/?]*)\/([^/?]*)([^?]*)(\?.*)?$/;

/** Where a request to `/proxy/services/...` goes: its service, after the service's own authentication. */
export function serviceExchange(access: CallerAccess, table: RoutingTable, req: IncomingMessage): MaybePromise<Exchange> {
  const url = req.url ?? '';
  const match = SERVICE_URL.exec(url);
  const [, project = '', run = '', rest = '', query = ''] = match ?? [];
  if (!match || !isDnsLabel(project) || !isDnsLabel(run)) throw new GatewayError(404, 'not_found', `no service at ${url}`);
  const route = table.service(project, run);
  if (!route) throw new GatewayError(404, 'not_found', `service ${run} not found in project ${project}`);
  const prefix = `/proxy/services/${project}/${run}`;
  const servicePath = rest || '/';
  const exchange: Exchange = route.stripPrefix
    ? { route, path: `${servicePath}${query}`, servicePath, prefix, errorShape: 'api' }
    : { route, path: `${prefix}${rest}${query}`, servicePath, errorShape: 'api' };
  return then(admit(access, route, req), () => exchange);
}
