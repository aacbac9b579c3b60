import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Context } from 'koa';

/** The console's session cookie: httpOnly, SameSite=Strict, Path=/; it holds a random token whose hash the database keeps. */
export const SESSION_COOKIE = 'orchestrator_session';
/** A state-changing request made with the cookie must repeat the session's CSRF token in this header. */
export const CSRF_HEADER = 'x-csrf-token';
/** A console session ends this long after sign-in, whatever happens in between. */
export const SESSION_TTL_MS = 12 * 60 * 60 * 1000;

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** The session token the request's cookie carries, if any. */
export function sessionCookie(ctx: Context): string | null {
  for (const part of (ctx.get('cookie') || '').split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name === SESSION_COOKIE) return value.join('=') || null;
  }
  return null;
}

/**
 * The CSRF token of a session: derived from the session token, so that it needs no storage, and readable only by
 * a page that can already call GET /api/session with the cookie (the same origin). A forged cross-site request
 * carries the cookie at most, never this header.
 */
export function csrfTokenOf(sessionToken: string): string {
  return createHmac('sha256', sessionToken).update('orchestrator console csrf').digest('hex');
}

/** Whether a request made with the session cookie may go on: reads always, changes only with the session's CSRF token. */
export function passesCsrfCheck(ctx: Context, sessionToken: string): boolean {
  if (SAFE_METHODS.has(ctx.method)) return true;
  const given = Buffer.from(ctx.get(CSRF_HEADER));
  const expected = Buffer.from(csrfTokenOf(sessionToken));
  return given.length === expected.length && timingSafeEqual(given, expected);
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
