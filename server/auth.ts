import type Router from '@koa/router';
import type { Context, Next } from 'koa';
import { isDnsLabel } from '../api/names.js';
import type { Queryable } from '../store/db.js';
import type { Role } from '../api/objects.js';
import { getProject, projectRole, userByToken, type ProjectRecord, type UserRecord } from '../store/projects.js';
import { getRunByName, type RunRecord } from '../store/runs.js';
import { CSRF_HEADER, userBySession } from '../store/sessions.js';
import { passesCsrfCheck, sessionCookie } from './console-session.js';
import { HttpError, notFound } from './http-errors.js';

export interface AuthState {
  user: UserRecord;
}

/**
 * Puts authentication first on every route of the router, so that it runs once a route has matched,
 * whatever the spelling of the path: no handler is reachable without a user. (Router-level `use`
 * would not do: its prefix is matched case-sensitively while routes are not.)
 */
export function authenticateEveryRoute(router: Router, db: Queryable): void {
  const authenticate = authMiddleware(db);
  for (const layer of router.stack) {
    if (layer.methods.length > 0) layer.stack.unshift(authenticate);
  }
}

/**
 * A route needs `Authorization: Bearer <token>`, the token looked up by its hash; or, from the console, its session
 * cookie, with the session's CSRF token on every request that changes something.
 */
export function authMiddleware(db: Queryable) {
  return async (ctx: Context, next: Next) => {
    (ctx.state as AuthState).user = await authenticatedUser(db, ctx);
    await next();
  };
}

async function authenticatedUser(db: Queryable, ctx: Context): Promise<UserRecord> {
  const header = ctx.get('authorization');
  const session = header ? null : sessionCookie(ctx);
  if (session) {
    const user = await userBySession(db, session);
    if (!user) throw new HttpError(401, 'unauthorized', 'the console session has expired or was signed out; sign in again');
    if (!passesCsrfCheck(ctx, session)) throw new HttpError(403, 'csrf', `a change made with the session cookie needs the session's ${CSRF_HEADER} header`);
    return user;
  }
  const match = /^Bearer\s+(\S+)$/i.exec(header);
  if (!match) throw new HttpError(401, 'unauthorized', 'missing or malformed Authorization header; expected "Bearer <token>"');
  const user = await userByToken(db, match[1]);
  if (!user) throw new HttpError(401, 'unauthorized', 'invalid token');
  return user;
}

export function currentUser(ctx: Context): UserRecord {
  return (ctx.state as AuthState).user;
}

/** The project named in the path, when it exists (404) and the caller is a member of it (403). */
export async function projectFor(db: Queryable, ctx: Context, name: string): Promise<ProjectRecord> {
  return (await projectAndRole(db, ctx, name)).project;
}

/** The run named in the path and its project, when both exist (404) and the caller is a member of the project (403). */
export async function runFor(db: Queryable, ctx: Context, projectName: string, runName: string): Promise<{ project: ProjectRecord; run: RunRecord }> {
  const project = await projectFor(db, ctx, projectName);
  const run = isDnsLabel(runName) ? await getRunByName(db, project.id, runName) : null;
  if (!run) throw notFound(`run ${runName} not found in project ${project.name}`);
  return { project, run };
}

/** The project named in the path, when the caller is an admin of it or a global admin (403 otherwise). */
export async function projectAdminFor(db: Queryable, ctx: Context, name: string): Promise<ProjectRecord> {
  const { project, role } = await projectAndRole(db, ctx, name);
  if (role !== 'admin') throw new HttpError(403, 'forbidden', `only an admin of project ${name} or a global admin may do this`);
  return project;
}

async function projectAndRole(db: Queryable, ctx: Context, name: string): Promise<{ project: ProjectRecord; role: Role }> {
  const project = isDnsLabel(name) ? await getProject(db, name) : null;
  if (!project) throw notFound(`project ${name} not found`);
  const role = await projectRole(db, project.id, currentUser(ctx));
  if (!role) throw new HttpError(403, 'forbidden', `you are not a member of project ${name}`);
  return { project, role };
}

export function requireAdmin(ctx: Context): void {
  if (currentUser(ctx).globalRole !== 'admin') throw new HttpError(403, 'forbidden', 'only an admin may do this');
}

/** A global admin may act on any user; any other user only on themselves. */
export function requireAdminOrSelf(ctx: Context, name: string): void {
  const user = currentUser(ctx);
  if (user.globalRole !== 'admin' && user.name !== name) throw new HttpError(403, 'forbidden', 'only an admin or the user themselves may do this');
}
