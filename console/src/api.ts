import type { ApiError, ConsoleSession, SessionRequest } from '../../api/objects.js';

/** A refused or failed call, with the server's own message. */
export class ApiFailure extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

/** Held in memory only: a reload asks the server for it again with the cookie. */
let csrfToken = '';
let onSignedOut: () => void = () => undefined;

/** What the console does when the server says the session is over (expired, or signed out elsewhere). */
export function whenSignedOut(handler: () => void): void {
  onSignedOut = handler;
}

/** Calls the management API with the session cookie; every change carries the session's CSRF token. */
export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = {};
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET') headers['x-csrf-token'] = csrfToken;
  const response = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
  if (response.status === 204) return undefined as T;
  const answer = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401 && path !== '/api/session') onSignedOut();
    throw new ApiFailure(response.status, (answer as ApiError | null)?.error?.message ?? `the server answered ${response.status}`);
  }
  return answer as T;
}

export async function signIn(token: string): Promise<ConsoleSession> {
  const request: SessionRequest = { token };
  const session = await call<ConsoleSession>('POST', '/api/session', request);
  csrfToken = session.csrfToken;
  return session;
}

/** The session the cookie holds; null when there is none or it has expired. */
export async function currentSession(): Promise<ConsoleSession | null> {
  try {
    const session = await call<ConsoleSession>('GET', '/api/session');
    csrfToken = session.csrfToken;
    return session;
  } catch (error) {
    if (error instanceof ApiFailure && (error.status === 401 || error.status === 400)) return null;
    throw error;
  }
}

export async function signOut(): Promise<void> {
  await call('DELETE', '/api/session');
  csrfToken = '';
}

/** The header that lets a request made with the session cookie change something, for calls made without call(). */
export const csrfHeader = (): Record<string, string> => ({ 'x-csrf-token': csrfToken });

export const projectPath = (project: string) => `/api/projects/${encodeURIComponent(project)}`;
