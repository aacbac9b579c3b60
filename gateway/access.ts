import type { IncomingHttpHeaders } from 'node:http';
import type { ServiceRoute } from '../api/services.js';
import type { AccessCache } from './access-cache.js';
import { GatewayError } from './errors.js';

const BEARER = /^Bearer\s+(\S+)$/i;

const unauthorized = (message: string) => new GatewayError(401, 'unauthorized', message, { 'WWW-Authenticate': 'Bearer' });

/**
 * A service with `auth: true` admits members of its project and global admins, by their API token, with the
 * same answers as the management API; the token is then removed so that it never reaches the service.
 * A public service gets the request's Authorization as it came.
 */
export async function admit(access: AccessCache, route: ServiceRoute, headers: IncomingHttpHeaders): Promise<void> {
  if (!route.auth) return;
  const token = BEARER.exec(headers.authorization ?? '')?.[1];
  if (token === undefined) throw unauthorized('missing or malformed Authorization header; expected "Bearer <token>"');
  const user = await access.user(token);
  if (!user) throw unauthorized('invalid token');
  if (!await access.role(route.projectId, user)) throw new GatewayError(403, 'forbidden', `you are not a member of project ${route.project}`);
  delete headers.authorization;
}

/** Whether the request's token is a member's (or a global admin's) of the project; never throws for a missing or wrong one. */
export async function isMember(access: AccessCache, projectId: string, headers: IncomingHttpHeaders): Promise<boolean> {
  const token = BEARER.exec(headers.authorization ?? '')?.[1];
  const user = token === undefined ? null : await access.user(token);
  return user !== null && await access.role(projectId, user) !== null;
}
