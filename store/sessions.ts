import { createHmac, timingSafeEqual } from 'node:crypto';
import type { Queryable } from './db.js';
import { hashToken, newToken, toUser, type UserRecord } from './projects.js';

/**
 * Opens a console session for the user: a new random token, of which only the hash is kept, valid for `ttlMs`.
 * Sessions already expired are removed on the way, so the table holds only live ones and a few stale ones.
 */
export async function createSession(db: Queryable, userId: string, ttlMs: number): Promise<{ token: string; expiresAt: Date }> {
  const token = newToken();
  await db.query('DELETE FROM console_sessions WHERE expires_at <= now()');
  const [row] = await db.query<{ expires_at: Date }>(
    `INSERT INTO console_sessions (token_hash, user_id, expires_at) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
     RETURNING expires_at`, [hashToken(token), userId, ttlMs]);
  return { token, expiresAt: row.expires_at };
}

/** The user a live session belongs to: null when the session is unknown, ended, expired, or its user was deleted. */
export async function userBySession(db: Queryable, token: string): Promise<UserRecord | null> {
  const rows = await db.query(
    `SELECT u.* FROM console_sessions s JOIN users u ON u.id = s.user_id
     WHERE s.token_hash = $1 AND s.expires_at > now() AND u.deleted_at IS NULL`, [hashToken(token)]);
  return rows[0] ? toUser(rows[0]) : null;
}

export async function deleteSession(db: Queryable, token: string): Promise<void> {
  await db.query('DELETE FROM console_sessions WHERE token_hash = $1', [hashToken(token)]);
}

export async function sessionExpiry(db: Queryable, token: string): Promise<Date | null> {
  const rows = await db.query<{ expires_at: Date }>('SELECT expires_at FROM console_sessions WHERE token_hash = $1', [hashToken(token)]);
  return rows[0]?.expires_at ?? null;
}

/** The console's session cookie: httpOnly, SameSite=Strict, Path=/; it holds a random token whose hash the database keeps. */
export const SESSION_COOKIE = 'orchestrator_session';
/** A state-changing request made with the cookie must repeat the session's CSRF token in this header. */
export const CSRF_HEADER = 'x-csrf-token';

/** The session token a request's Cookie header carries, if any. */
export function sessionTokenIn(cookieHeader: string | undefined): string | null {
  if (cookieHeader === undefined) return null;
  for (const part of cookieHeader.split(';')) {
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

/** Whether `given` is the session's CSRF token, compared in constant time. */
export function isCsrfTokenOf(sessionToken: string, given: string): boolean {
  const expected = Buffer.from(csrfTokenOf(sessionToken));
  const received = Buffer.from(given);
  return received.length === expected.length && timingSafeEqual(received, expected);
}
