import type { IncomingHttpHeaders } from 'node:http';
import type { Role } from '../api/objects.js';
import type { ServiceRoute } from '../api/services.js';
import { GatewayError } from './errors.js';

/** Who holds a token and what they may do: the database's answer in a server, the server's last word in a gateway process. */
export interface CallerAccess {
  /** The role of the token's holder in the project: null for a user who is no member, undefined for a token nobody holds. */
  roleOf(token: string, projectId: string): Promise<Role | null | undefined>;
}

const BEARER = /^Bearer\s+(\S+)$/i;

const unauthorized = (message: string) => new GatewayError(401, 'unauthorized', message, { 'WWW-Authenticate': 'Bearer' });

/**
 * A service with `auth: true` admits members of its project and global admins, by their API token, with the
 * same answers as the management API; the token is then removed so that it never reaches the service.
 * A public service gets the request's Authorization as it came.
 */
export async function admit(access: CallerAccess, route: ServiceRoute, headers: IncomingHttpHeaders): Promise<void> {
  if (!route.auth) return;
  const token = BEARER.exec(headers.authorization ?? '')?.[1];
  if (token === undefined) throw unauthorized('missing or malformed Authorization header; expected "Bearer <token>"');
  const role = await access.roleOf(token, route.projectId);
  if (role === undefined) throw unauthorized('invalid token');
  if (role === null) throw new GatewayError(403, 'forbidden', `you are not a member of project ${route.project}`);
  delete headers.authorization;
}

/** Whether the request's token is a member's (or a global admin's) of the project; never throws for a missing or wrong one. */
export async function isMember(access: CallerAccess, projectId: string, headers: IncomingHttpHeaders): Promise<boolean> {
  const token = BEARER.exec(headers.authorization ?? '')?.[1];
  return token !== undefined && (await access.roleOf(token, projectId) ?? null) !== null;
}
