import Router from '@koa/router';
import { PassThrough } from 'node:stream';
import { projectFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { LiveRuns } from '../live-runs.js';

/** A comment line this often keeps proxies from closing a quiet stream. */
const HEARTBEAT_MS = 15_000;

/**
 * The console's one live stream (server-sent events, api/live-runs.ts): `snapshot`, the project's runs list, at once;
 * then `changes`, the runs that changed and those that left, whenever a NOTIFY or the periodic read of the runs'
 * versions finds some. Every tab of a project shares one reader of the list.
 */
export function liveRoutes(server: ServerContext): Router {
  const live = new LiveRuns(server.db, server.logger);
  const router = new Router({ prefix: '/api/projects/:project/live' });

  router.get('/', async (ctx) => {
    const project = await projectFor(server.db, ctx, ctx.params.project);
    const stream = new PassThrough();
    ctx.set('cache-control', 'no-store');
    ctx.set('x-accel-buffering', 'no');
    ctx.type = 'text/event-stream';
    ctx.body = stream;

    const unsubscribe = live.subscribe(project.id, ({ event, data }) => {
      if (!stream.destroyed) stream.write(`event: ${event}\ndata: ${data}\n\n`);
    });
    const heartbeat = setInterval(() => stream.write(': keep-alive\n\n'), HEARTBEAT_MS);
    ctx.req.once('close', () => {
      clearInterval(heartbeat);
      unsubscribe();
      stream.end();
    });
  });
  return router;
}
