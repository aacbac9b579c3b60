import type { Context } from 'koa';
import { CSRF_HEADER, isCsrfTokenOf, SESSION_COOKIE, sessionTokenIn } from '../store/sessions.js';

/** A console session ends this long after sign-in, whatever happens in between. */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** The session token the request's cookie carries, if any. */
export function sessionCookie(ctx: Context): string | null {
  return sessionTokenIn(ctx.get('cookie'));
}

/** Whether a request made with the session cookie may go on: reads always, changes only with the session's CSRF token. */
export function passesCsrfCheck(ctx: Context, sessionToken: string): boolean {
  return SAFE_METHODS.has(ctx.method) || isCsrfTokenOf(sessionToken, ctx.get(CSRF_HEADER));
}

export function setSessionCookie(ctx: Context, token: string, expiresAt: Date): void {
  const maxAge = Math.max(0, Math.floor((expiresAt.getTime() - Date.now()) / 1000));
  ctx.set('set-cookie', cookie(ctx, token, maxAge));
}

export function clearSessionCookie(ctx: Context): void {
  ctx.set('set-cookie', cookie(ctx, '', 0));
}

function cookie(ctx: Context, value: string, maxAgeSeconds: number): string {
  return `${SESSION_COOKIE}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSeconds}${ctx.secure ? '; Secure' : ''}`;
}
