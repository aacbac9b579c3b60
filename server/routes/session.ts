import Router from '@koa/router';
import type { Context } from 'koa';
import type { ConsoleSession } from '../../api/objects.js';
import { userByToken, userView, type UserRecord } from '../../store/projects.js';
import { createSession, csrfTokenOf, deleteSession, sessionExpiry } from '../../store/sessions.js';
import { authMiddleware, currentUser } from '../auth.js';
import { clearSessionCookie, SESSION_TTL_MS, sessionCookie, setSessionCookie } from '../console-session.js';
import type { ServerContext } from '../context.js';
import { badRequest, HttpError, readJsonObject } from '../http-errors.js';

/** The console's sign-in: a user token exchanged for a session cookie, the session read back, and sign-out. */
export function sessionRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/session' });
  const authenticate = authMiddleware(db);

  router.post('/', async (ctx) => {
    refuseCrossSiteSignIn(ctx);
    const body = await readJsonObject(ctx);
    if (typeof body.token !== 'string' || body.token === '') throw badRequest('token: expected the user token that `orchestrator config` or an admin gave you');
    const user = await userByToken(db, body.token.trim());
    if (!user) throw new HttpError(401, 'unauthorized', 'this token is not valid: it may be mistyped, or rotated or deleted by an admin');
    const session = await createSession(db, user.id, SESSION_TTL_MS);
    setSessionCookie(ctx, session.token, session.expiresAt);
    ctx.status = 201;
    ctx.body = view(user, session.token, session.expiresAt);
  });

  router.get('/', authenticate, async (ctx) => {
    const token = cookieSession(ctx);
    ctx.body = view(currentUser(ctx), token, (await sessionExpiry(db, token))!);
  });

  router.delete('/', authenticate, async (ctx) => {
    await deleteSession(db, cookieSession(ctx));
    clearSessionCookie(ctx);
    ctx.status = 204;
  });
  return router;
}

/**
 * Another site's page must not sign a browser in to a session of its choosing (login CSRF): a sign-in is JSON, which
 * an HTML form cannot send without the browser asking first, and comes from a page of this server when the browser says.
 */
function refuseCrossSiteSignIn(ctx: Context): void {
  if (!ctx.is('application/json')) throw new HttpError(415, 'unsupported_media_type', 'sign in with a JSON body: {"token": "..."}');
  const origin = ctx.get('origin');
  if (origin && origin !== 'null' && hostOf(origin) === ctx.host) return;
  if (origin) throw new HttpError(403, 'cross_origin', `a sign-in from ${origin} is refused: sign in from the console at this server's own address`);
}

const hostOf = (origin: string): string | null => {
  try {
    return new URL(origin).host;
  } catch {
    return null;
  }
};

function cookieSession(ctx: Context): string {
  const token = sessionCookie(ctx);
  if (!token || ctx.get('authorization')) throw badRequest('this asks about a console session: call it with the session cookie, not a bearer token');
  return token;
}

function view(user: UserRecord, token: string, expiresAt: Date): ConsoleSession {
  return { user: userView(user), csrfToken: csrfTokenOf(token), expiresAt: expiresAt.toISOString() };
}
