import Router from '@koa/router';
import { PassThrough } from 'node:stream';
import { CHANNELS } from '../../store/channels.js';
import { listRunViews } from '../../store/run-views.js';
import { projectFor } from '../auth.js';
import type { ServerContext } from '../context.js';

/** The console's runs list holds this many runs, newest first, finished ones included. */
const LIVE_RUNS_LIMIT = 500;
/** Not every status change sends a NOTIFY (an agent's answer does not), so the list is read again this often too. */
const REREAD_MS = 1000;
/** NOTIFYs that come in a burst are read as one. */
const NUDGE_DEBOUNCE_MS = 50;
/** A comment line this often keeps proxies from closing a quiet stream. */
const HEARTBEAT_MS = 15_000;

/**
 * The console's one live stream (server-sent events): `runs`, the project's runs list, sent at once and again
 * whenever it changes, whether a NOTIFY says so or the periodic read finds it.
 */
export function liveRoutes(server: ServerContext): Router {
  const { db, logger } = server;
  const router = new Router({ prefix: '/api/projects/:project/live' });

  router.get('/', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const stream = new PassThrough();
    ctx.set('cache-control', 'no-store');
    ctx.set('x-accel-buffering', 'no');
    ctx.type = 'text/event-stream';
    ctx.body = stream;

    let lastSent = '';
    let reading = false;
    let again = false;
    const send = async () => {
      if (reading) { again = true; return; }
      reading = true;
      try {
        do {
          again = false;
          const runs = JSON.stringify(await listRunViews(db, project.id, true, LIVE_RUNS_LIMIT));
          if (runs !== lastSent && !stream.destroyed) stream.write(`event: runs\ndata: ${runs}\n\n`);
          lastSent = runs;
        } while (again);
      } catch (error) {
        logger.warn(`console live stream of ${project.name}: ${(error as Error).message}`);
      } finally {
        reading = false;
      }
    };
    let nudge: NodeJS.Timeout | undefined;
    const nudged = () => {
      clearTimeout(nudge);
      nudge = setTimeout(() => void send(), NUDGE_DEBOUNCE_MS);
    };
    const reread = setInterval(() => void send(), REREAD_MS);
    const heartbeat = setInterval(() => stream.write(': keep-alive\n\n'), HEARTBEAT_MS);
    let closed = false;
    const unlistens: Array<() => Promise<void>> = [];
    const unlisten = (stop: () => Promise<void>) => void stop().catch(() => undefined);
    ctx.req.once('close', () => {
      closed = true;
      clearInterval(reread);
      clearInterval(heartbeat);
      clearTimeout(nudge);
      unlistens.forEach(unlisten);
      stream.end();
    });
    for (const channel of [CHANNELS.runs, CHANNELS.instances]) {
      const stop = await db.listen(channel, nudged);
      // A browser that left while the LISTEN was being set up is not listened for.
      if (closed) unlisten(stop);
      else unlistens.push(stop);
    }
    await send();
  });
  return router;
}
