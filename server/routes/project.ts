import Router from '@koa/router';
import { Value } from '@sinclair/typebox/value';
import { isDnsLabel } from '../../api/names.js';
import { EventObjectKind, MAX_EVENTS_LIMIT, Role, type Member, type ProjectBackend, type ServerInfo, type User, type UserWithToken } from '../../api/objects.js';
import type { OfferListing } from '../../api/offer.js';
import { normalizeResources } from '../../api/resources.js';
import { offerSatisfies } from '../../api/resources.js';
import { backendView } from '../../backends/config.js';
import { accessChanged } from '../../gateway/access-cache.js';
import { listEvents } from '../../store/events.js';
import { listInstanceViews } from '../../store/instances.js';
import {
  addMember, createUser, deleteUser, getUser, listMembers, listProjectsOf, listUsers, memberRole, projectView, removeMember, rotateToken,
  SERVER_ADMIN, userView, type UserRecord,
} from '../../store/projects.js';
import { currentUser, projectAdminFor, projectFor, requireAdmin, requireAdminOrSelf, type AuthState } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, conflict, notFound, readJsonObject } from '../http-errors.js';
import { cursorQuery, limitQuery, timeQuery } from '../query.js';

const USER_NAME_RULE = 'expected a lowercase letter, then at most 62 lowercase letters, digits, "-", "_" or "."';
const isUserName = (value: unknown): value is string => typeof value === 'string' && /^[a-z][-a-z0-9_.]{0,62}$/.test(value);

export function projectRoutes(server: ServerContext): Router {
  const { db, pool, logger } = server;
  const router = new Router({ prefix: '/api' });

  router.get('/server/info', (ctx) => {
    const info: ServerInfo = { version: server.version, database: db.driver, user: (ctx.state as AuthState).user.name };
    ctx.body = info;
  });

  router.get('/projects', async (ctx) => {
    ctx.body = (await listProjectsOf(db, (ctx.state as AuthState).user)).map(projectView);
  });

  router.get('/projects/:project', async (ctx) => {
    ctx.body = projectView(await projectFor(db, ctx, ctx.params.project));
  });

  router.get('/users', async (ctx) => {
    requireAdmin(ctx);
    const users: User[] = (await listUsers(db)).map(userView);
    ctx.body = users;
  });

  router.post('/users', async (ctx) => {
    requireAdmin(ctx);
    const body = await readJsonObject(ctx);
    if (!isUserName(body.name)) throw badRequest(`name: ${USER_NAME_RULE}`);
    if (body.admin !== undefined && typeof body.admin !== 'boolean') throw badRequest('admin: expected true or false');
    const created = await createUser(db, body.name, body.admin === true ? 'admin' : 'user');
    if (!created) throw conflict(`user ${body.name} already exists`);
    const answer: UserWithToken = { ...userView(created.user), token: created.token };
    ctx.status = 201;
    ctx.body = answer;
  });

  router.delete('/users/:name', async (ctx) => {
    requireAdmin(ctx);
    const user = await existingUser(ctx.params.name);
    if (user.name === SERVER_ADMIN) throw conflict(`${SERVER_ADMIN} is the server's own admin, made again at every start; it cannot be deleted`);
    if (user.id === currentUser(ctx).id) throw conflict('you cannot delete yourself; another admin can');
    await deleteUser(db, user);
    await accessChanged(db, logger);
    ctx.status = 204;
  });

  router.post('/users/:name/rotate-token', async (ctx) => {
    requireAdminOrSelf(ctx, ctx.params.name);
    const user = await existingUser(ctx.params.name);
    if (user.name === SERVER_ADMIN) {
      throw conflict(`the token of ${SERVER_ADMIN} is set where the server runs: change ORCHESTRATOR_SERVER_ADMIN_TOKEN or the admin-token file in the server's folder, then restart the server`);
    }
    const answer: UserWithToken = { ...userView(user), token: await rotateToken(db, user) };
    await accessChanged(db, logger);
    ctx.body = answer;
  });

  router.get('/projects/:project/members', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const members: Member[] = await listMembers(db, project.id);
    ctx.body = members;
  });

  router.post('/projects/:project/members', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    const body = await readJsonObject(ctx);
    if (!isUserName(body.user)) throw badRequest(`user: ${USER_NAME_RULE}`);
    if (body.role !== undefined && !Value.Check(Role, body.role)) throw badRequest('role: expected "admin" or "user"');
    const user = await existingUser(body.user);
    const current = await memberRole(db, project.id, user.id);
    if (current && body.role === undefined) {
      throw conflict(`${user.name} is already a member of project ${project.name} as ${current}; give a role to change it`);
    }
    const member: Member = { user: user.name, role: body.role ?? 'user' };
    await addMember(db, project.id, user.id, member.role);
    await accessChanged(db, logger);
    ctx.status = current ? 200 : 201;
    ctx.body = member;
  });

  router.delete('/projects/:project/members/:user', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    const user = await existingUser(ctx.params.user);
    if (!(await removeMember(db, project.id, user.id))) throw notFound(`${user.name} is not a member of project ${project.name}`);
    await accessChanged(db, logger);
    ctx.status = 204;
  });

  router.get('/projects/:project/backends', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const backends: ProjectBackend[] = project.backends.map(backendView);
    ctx.body = backends;
  });

  router.get('/projects/:project/offers', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const backend = typeof ctx.query.backend === 'string' ? ctx.query.backend : undefined;
    let requirement = null;
    if (typeof ctx.query.gpu === 'string') {
      try {
        // Spot and on-demand offers alike: the list is of what can be rented, whatever a run's spot_policy.
        requirement = { ...normalizeResources({ gpu: ctx.query.gpu }, 'fleet'), spot: 'auto' as const };
      } catch (error) {
        throw badRequest(`gpu: ${(error as Error).message}`);
      }
    }
    const listing = await pool.offers(project.id, backend ? [backend] : undefined, { fresh: true });
    const offers = requirement ? listing.offers.filter((o) => offerSatisfies(o, requirement)) : listing.offers;
    const body: OfferListing = { ...listing, offers };
    ctx.body = body;
  });

  router.get('/projects/:project/instances', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    ctx.body = await listInstanceViews(db, project.id, { includeTerminated: ctx.query.all === 'true' });
  });

  router.get('/projects/:project/events', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const after = cursorQuery(ctx, 'after');
    const objectName = typeof ctx.query.object === 'string' ? ctx.query.object : undefined;
    if (objectName !== undefined && !isDnsLabel(objectName)) throw badRequest('object: expected the name of a run, fleet or instance');
    const objectKind = ctx.query.kind;
    if (objectKind !== undefined && !Value.Check(EventObjectKind, objectKind)) throw badRequest('kind: expected "fleet", "instance", "run" or "gateway"');
    ctx.body = await listEvents(db, project.id, {
      after, objectName, objectKind, since: timeQuery(ctx, 'since'), until: timeQuery(ctx, 'until'), limit: limitQuery(ctx, MAX_EVENTS_LIMIT),
    });
  });
  return router;

  async function existingUser(name: string): Promise<UserRecord> {
    if (!isUserName(name)) throw badRequest(`user name: ${USER_NAME_RULE}`);
    const user = await getUser(db, name);
    if (!user) throw notFound(`user ${name} not found`);
    return user;
  }
}
