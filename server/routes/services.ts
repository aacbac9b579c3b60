import Router from '@koa/router';
import type { ServiceStats } from '../../api/services.js';
import { getRunView } from '../../store/run-views.js';
import { serviceWindows } from '../../store/service-stats.js';
import type { ServerContext } from '../context.js';
import { badRequest, HttpError } from '../http-errors.js';
import { serviceFigures } from '../service-figures.js';
import { runFor } from './runs.js';

export const DEFAULT_STATS_WINDOW_SECONDS = 300;
/** Statistics are kept for an hour (store/service-stats.ts); a window under 10 s says little. */
const STATS_WINDOW_RANGE = { min: 10, max: 3600 };

function windowSecondsOf(value: string | string[] | undefined): number {
  if (value === undefined) return DEFAULT_STATS_WINDOW_SECONDS;
  const seconds = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : NaN;
  if (!(seconds >= STATS_WINDOW_RANGE.min && seconds <= STATS_WINDOW_RANGE.max)) {
    throw badRequest(`window: expected a whole number of seconds from ${STATS_WINDOW_RANGE.min} to ${STATS_WINDOW_RANGE.max}, got ${JSON.stringify(value)}`);
  }
  return seconds;
}

/** What users see of their services beyond the run itself: request statistics. */
export function serviceRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/projects/:project/services' });

  router.get('/:name/stats', async (ctx) => {
    const { run } = await runFor(server, ctx, ctx.params.project, ctx.params.name);
    if (run.kind !== 'service') throw new HttpError(409, 'not_a_service', `run ${run.name} is a ${run.kind}, not a service; only services have request statistics`);
    const windowSeconds = windowSecondsOf(ctx.query.window);
    const [view, windows] = await Promise.all([getRunView(db, run.id), serviceWindows(db, [run.id], windowSeconds)]);
    const stats: ServiceStats = {
      run: run.name,
      windowSeconds,
      ...serviceFigures(windows.get(run.id), windowSeconds),
      readyReplicas: view.service?.replicas.filter((replica) => replica.state === 'ready').length ?? 0,
      desiredReplicas: view.service?.desiredReplicas ?? 0,
    };
    ctx.body = stats;
  });
  return router;
}
