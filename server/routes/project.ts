import Router from '@koa/router';
import { isDnsLabel } from '../../api/names.js';
import type { ServerInfo } from '../../api/objects.js';
import type { OfferListing } from '../../api/offer.js';
import { normalizeResources } from '../../api/resources.js';
import { offerSatisfies } from '../../api/resources.js';
import { listEvents } from '../../store/events.js';
import { listInstanceViews } from '../../store/instances.js';
import { addMember, createUser, getUser, listProjectsOf, projectView } from '../../store/projects.js';
import { projectFor, requireAdmin, type AuthState } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, conflict, notFound, readJsonObject } from '../http-errors.js';
import { cursorQuery } from '../query.js';

const USER_NAME_RULE = 'expected a user name of lowercase letters, digits, "-", "_" or "."';
const isUserName = (value: unknown): value is string => typeof value === 'string' && /^[a-z][-a-z0-9_.]{0,62}$/.test(value);

export function projectRoutes(server: ServerContext): Router {
  const { db, pool } = server;
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

  router.post('/users', async (ctx) => {
    requireAdmin(ctx);
    const body = await readJsonObject(ctx);
    if (!isUserName(body.name)) throw badRequest(`name: ${USER_NAME_RULE}`);
    const created = await createUser(db, body.name, body.admin === true ? 'admin' : 'user');
    if (!created) throw conflict(`user ${body.name} already exists`);
    ctx.status = 201;
    ctx.body = { name: created.user.name, token: created.token };
  });

  router.post('/projects/:project/members', async (ctx) => {
    requireAdmin(ctx);
    const project = await projectFor(db, ctx, ctx.params.project);
    const body = await readJsonObject(ctx);
    if (!isUserName(body.user)) throw badRequest(`user: ${USER_NAME_RULE}`);
    const user = await getUser(db, body.user);
    if (!user) throw notFound(`user ${body.user} not found`);
    await addMember(db, project.id, user.id, body.role === 'admin' ? 'admin' : 'user');
    ctx.status = 204;
  });

  router.get('/projects/:project/offers', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const backend = typeof ctx.query.backend === 'string' ? ctx.query.backend : undefined;
    let requirement = null;
    if (typeof ctx.query.gpu === 'string') {
      try {
        requirement = normalizeResources({ gpu: ctx.query.gpu }, 'fleet');
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
    ctx.body = await listEvents(db, project.id, { after, objectName });
  });
  return router;
}
