import Router from '@koa/router';
import type { ServiceStatsSeries } from '../../api/services.js';
import { FINISHED_RUN_STATUSES } from '../../api/status.js';
import { CHANNELS } from '../../store/channels.js';
import { recordEvent } from '../../store/events.js';
import { getRunView } from '../../store/run-views.js';
import { serviceSteps, serviceWindows } from '../../store/service-stats.js';
import { liveServicesOf, replicaViewsOf, rollBackService } from '../../store/services.js';
import { projectFor, runFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, conflict, HttpError } from '../http-errors.js';
import { serviceFigures, serviceStats } from '../service-figures.js';

const DEFAULT_STATS_WINDOW_SECONDS = 300;
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

/** A chart of more points than this says no more; the default step gives 60. */
const MAX_SERIES_POINTS = 720;
const DEFAULT_SERIES_POINTS = 60;

function stepSecondsOf(value: string | string[] | undefined, windowSeconds: number): number {
  const fewest = Math.ceil(windowSeconds / MAX_SERIES_POINTS);
  if (value === undefined) return Math.max(1, Math.ceil(windowSeconds / DEFAULT_SERIES_POINTS));
  const seconds = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : NaN;
  if (!(seconds >= fewest && seconds <= windowSeconds)) {
    throw badRequest(`step: expected a whole number of seconds from ${fewest} to the window's ${windowSeconds} (at most ${MAX_SERIES_POINTS} points), got ${JSON.stringify(value)}`);
  }
  return seconds;
}

function notAService(run: { name: string; kind: string }, what: string): HttpError {
  return new HttpError(409, 'not_a_service', `run ${run.name} is a ${run.kind}, not a service; only services ${what}`);
}

/** What users see and do with their services beyond the run itself: request statistics, and rollback. */
export function serviceRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/projects/:project/services' });

  router.get('/stats', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const windowSeconds = windowSecondsOf(ctx.query.window);
    const services = await liveServicesOf(db, project.id);
    const ids = services.map((service) => service.id);
    const [windows, replicas] = await Promise.all([serviceWindows(db, ids, windowSeconds), replicaViewsOf(db, ids, [])]);
    ctx.body = services.map((service) => serviceStats(service.name, windowSeconds, windows.get(service.id), replicas.get(service.id)!, service.desiredReplicas));
  });

  router.get('/:name/stats', async (ctx) => {
    const { run } = await runFor(db, ctx, ctx.params.project, ctx.params.name);
    if (run.kind !== 'service') throw notAService(run, 'have request statistics');
    const windowSeconds = windowSecondsOf(ctx.query.window);
    const [view, windows] = await Promise.all([getRunView(db, run.id), serviceWindows(db, [run.id], windowSeconds)]);
    ctx.body = serviceStats(run.name, windowSeconds, windows.get(run.id), view.service?.replicas ?? [], view.service?.desiredReplicas ?? 0);
  });

  router.get('/:name/stats/series', async (ctx) => {
    const { run } = await runFor(db, ctx, ctx.params.project, ctx.params.name);
    if (run.kind !== 'service') throw notAService(run, 'have request statistics');
    const windowSeconds = windowSecondsOf(ctx.query.window);
    const stepSeconds = stepSecondsOf(ctx.query.step, windowSeconds);
    const stepMs = stepSeconds * 1000;
    const last = Math.floor(Date.now() / stepMs) * stepMs;
    const first = last - (Math.ceil(windowSeconds / stepSeconds) - 1) * stepMs;
    const steps = await serviceSteps(db, run.id, new Date(first), stepSeconds);
    const series: ServiceStatsSeries = { run: run.name, windowSeconds, stepSeconds, points: [] };
    for (let at = first; at <= last; at += stepMs) {
      const { requests, requestsPerSecond, errors, errorRate, p50Ms, p99Ms } = serviceFigures(steps.get(at), stepSeconds);
      series.points.push({ at: new Date(at).toISOString(), requests, requestsPerSecond, errors, errorRate, p50Ms, p99Ms });
    }
    ctx.body = series;
  });

  router.post('/:name/rollback', async (ctx) => {
    const { project, run } = await runFor(db, ctx, ctx.params.project, ctx.params.name);
    if (run.kind !== 'service') throw notAService(run, 'roll back');
    if (FINISHED_RUN_STATUSES.includes(run.status) || run.desired !== 'run') throw conflict(`service ${run.name} is ${run.desired === 'run' ? run.status : 'stopping'}; apply it to run it again`);
    const rolled = await rollBackService(db, run);
    if ('refused' in rolled) throw conflict(rolled.refused);
    await recordEvent(db, { projectId: project.id, objectKind: 'run', objectId: run.id, objectName: run.name, reason: 'RolledBack', message: `back to generation ${rolled.generation} from ${run.generation}, requested by the user` });
    await db.notify(CHANNELS.runs);
    ctx.body = await getRunView(db, run.id);
  });
  return router;
}
