import Router from '@koa/router';
import { CHANNELS, runChange } from '../../store/channels.js';
import { recordEvent } from '../../store/events.js';
import { getRunView, listRunViews } from '../../store/run-views.js';
import { deleteRun, requestRunStop } from '../../store/runs.js';
import { projectFor, runFor, type AuthState } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, conflict, readJsonObject } from '../http-errors.js';
import { planRun } from '../plan-run.js';
import { checkedFiles, checkedFleetsApplied, checkedRepos, checkedRunSpec } from '../specs.js';
import { submitRun } from '../submit-run.js';

export function runRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/projects/:project/runs' });

  router.post('/plan', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const body = await readJsonObject(ctx);
    const spec = checkedRunSpec(body.spec);
    ctx.body = await planRun(server, project, spec, checkedFleetsApplied(body.fleets, project));
  });

  router.post('/apply', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const body = await readJsonObject(ctx);
    const spec = checkedRunSpec(body.spec);
    const files = checkedFiles(body.files ?? []);
    const run = await submitRun(db, project, (ctx.state as AuthState).user.id, spec, files, checkedRepos(spec, body.repos));
    await db.notify(CHANNELS.runs, runChange([run]));
    ctx.status = 201;
    ctx.body = await getRunView(db, run.id);
  });

  router.get('/', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    ctx.body = await listRunViews(db, project.id, ctx.query.all === 'true');
  });

  router.get('/:name', async (ctx) => {
    const { run } = await runFor(db, ctx, ctx.params.project, ctx.params.name);
    ctx.body = await getRunView(db, run.id);
  });

  router.post('/:name/stop', async (ctx) => {
    const { project, run } = await runFor(db, ctx, ctx.params.project, ctx.params.name);
    const body = await readJsonObject(ctx);
    if (body.abort !== undefined && typeof body.abort !== 'boolean') throw badRequest('abort: expected true or false');
    await requestRunStop(db, run.id, body.abort === true);
    await recordEvent(db, { projectId: project.id, objectKind: 'run', objectId: run.id, objectName: run.name, reason: body.abort ? 'Aborting' : 'Stopping', message: 'requested by the user' });
    await db.notify(CHANNELS.runs);
    ctx.status = 202;
    ctx.body = await getRunView(db, run.id);
  });

  router.delete('/:name', async (ctx) => {
    const { run } = await runFor(db, ctx, ctx.params.project, ctx.params.name);
    if (!(await deleteRun(db, run.id))) throw conflict(`run ${run.name} is ${run.status}; stop it before deleting it`);
    ctx.status = 204;
  });
  return router;
}
