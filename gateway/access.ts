import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Role } from '../api/objects.js';
import type { ServiceRoute } from '../api/services.js';
import { CSRF_HEADER, isCsrfTokenOf, SESSION_COOKIE, sessionTokenIn } from '../store/sessions.js';
import { GatewayError } from './errors.js';
import { then, type MaybePromise } from './maybe-async.js';

/** Who holds a token and what they may do: the database's answer in a server, the server's last word in a gateway process. */
export interface CallerAccess {
  /** The role of the token's holder in the project: null for a user who is no member, undefined for a token nobody holds. */
  roleOf(token: string, projectId: string): MaybePromise<Role | null | undefined>;
  /** The same for a console session (the server's own model endpoint); a gateway process has none and admits none. */
  roleOfSession?(session: string, projectId: string): Promise<Role | null | undefined>;
}

const BEARER = /^Bearer\s+(\S+)$/i;
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

const unauthorized = (message: string) => new GatewayError(401, 'unauthorized', message, { 'WWW-Authenticate': 'Bearer' });

/**
 * A service with `auth: true` admits members of its project and global admins, by their API token, with the
 * same answers as the management API; the token is then removed so that it never reaches the service.
 * A public service gets the request's Authorization as it came. `consoleSession`: the console's session cookie is
 * accepted in place of a token, with its CSRF header on a change, as the management API accepts it.
 * No service ever sees that cookie or header.
 */
export function admit(access: CallerAccess, route: ServiceRoute, req: Pick<IncomingMessage, 'headers' | 'method'>, consoleSession = false): MaybePromise<void> {
  const session = withoutConsoleSession(req.headers);
  if (!route.auth) return;
  const token = BEARER.exec(req.headers.authorization ?? '')?.[1];
  const viaSession = token === undefined && consoleSession && session.token !== null && access.roleOfSession !== undefined;
  if (token === undefined && !viaSession) throw unauthorized('missing or malformed Authorization header; expected "Bearer <token>"');
  const role = viaSession ? access.roleOfSession!(session.token!, route.projectId) : access.roleOf(token!, route.projectId);
  return then(role, (found) => {
    if (found === undefined) throw unauthorized(viaSession ? 'the console session has expired or was signed out; sign in again' : 'invalid token');
    if (found === null) throw new GatewayError(403, 'forbidden', `you are not a member of project ${route.project}`);
    if (viaSession && !SAFE_METHODS.has(req.method ?? 'GET') && !isCsrfTokenOf(session.token!, session.csrf)) {
      throw new GatewayError(403, 'csrf', `a request made with the console's session cookie needs the session's ${CSRF_HEADER} header`);
    }
    delete req.headers.authorization;
  });
}

/** Whether the request's token (or, on the server's model endpoint, console session) is a member's (or a global admin's) of the project; never throws for a missing or wrong one. */
export async function isMember(access: CallerAccess, projectId: string, headers: IncomingHttpHeaders, consoleSession = false): Promise<boolean> {
  const token = BEARER.exec(headers.authorization ?? '')?.[1];
  if (token !== undefined) return (await access.roleOf(token, projectId) ?? null) !== null;
  const session = consoleSession ? sessionTokenIn(headers.cookie) : null;
  return session !== null && access.roleOfSession !== undefined && (await access.roleOfSession(session, projectId) ?? null) !== null;
}

/** Takes the console's session cookie and CSRF header out of the headers a service would get, and returns them. */
function withoutConsoleSession(headers: IncomingHttpHeaders): { token: string | null; csrf: string } {
  const token = sessionTokenIn(headers.cookie);
  const csrf = String(headers[CSRF_HEADER] ?? '');
  delete headers[CSRF_HEADER];
  if (token !== null) {
    const others = headers.cookie!.split(';').filter((part) => part.trim().split('=')[0] !== SESSION_COOKIE).join(';').trim();
    if (others) headers.cookie = others;
    else delete headers.cookie;
  }
  return { token, csrf };
}
