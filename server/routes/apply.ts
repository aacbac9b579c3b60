import Router from '@koa/router';
import type { ApplyResult } from '../../api/objects.js';
import { fleetView } from '../../store/fleets.js';
import { gatewayView, listCertificates } from '../../store/gateways.js';
import { listInstanceViews } from '../../store/instances.js';
import { runViewsOf } from '../../store/run-views.js';
import { applyItems } from '../apply.js';
import { projectFor, type AuthState } from '../auth.js';
import type { ServerContext } from '../context.js';
import { readJsonObject } from '../http-errors.js';
import { checkedApplyItems } from '../specs.js';

/**
 * `POST /api/projects/:project/apply {items: [{spec, files?}]}`: gateways, fleets and runs together, all or nothing.
 * Every item is validated first (one 422 lists every problem); then all are written together (`applyItems`).
 */
export function applyRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/projects/:project' });

  router.post('/apply', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const items = checkedApplyItems(await readJsonObject(ctx), project);
    const written = await applyItems(db, project, (ctx.state as AuthState).user.id, items);
    // One read for all the runs' views: each view alone read its project's whole queue for its position.
    const runs = new Map((await runViewsOf(db, written.flatMap((w) => (w.kind === 'run' ? [w.run.id] : [])))).map((run) => [run.id, run]));
    const result: ApplyResult = {
      items: await Promise.all(written.map(async (w): Promise<ApplyResult['items'][number]> => {
        if (w.kind === 'run') return { kind: 'run', run: runs.get(w.run.id)! };
        if (w.kind === 'gateway') return { kind: 'gateway', action: w.action, gateway: gatewayView(w.gateway, project.name, await listCertificates(db, w.gateway.id)) };
        return { kind: 'fleet', action: w.action, fleet: fleetView(w.fleet, project.name, await listInstanceViews(db, project.id, { fleetId: w.fleet.id, includeTerminated: false })) };
      })),
    };
    ctx.status = written.some((w) => w.kind === 'run' || w.action === 'create') ? 201 : 200;
    ctx.body = result;
  });
  return router;
}
