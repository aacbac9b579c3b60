import Koa from 'koa';
import { authMiddleware } from './auth.js';
import type { ServerContext } from './context.js';
import { errorMiddleware } from './http-errors.js';
import { fleetRoutes } from './routes/fleets.js';
import { logRoutes } from './routes/logs.js';
import { projectRoutes } from './routes/project.js';
import { runRoutes } from './routes/runs.js';

/** The management API: JSON under /api, one error shape, a bearer token on every route. */
export function createApp(server: ServerContext): Koa {
  const app = new Koa();
  app.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'ERR_STREAM_PREMATURE_CLOSE' || error.code === 'ECONNRESET' || error.code === 'EPIPE') return;
    server.logger.error(`http: ${error.stack ?? error.message}`);
  });
  app.use(errorMiddleware(server.logger));
  app.use(async (ctx, next) => {
    if (ctx.path.startsWith('/api/') || ctx.path === '/api') await authMiddleware(server.db)(ctx, next);
    else await next();
  });
  for (const router of [projectRoutes(server), fleetRoutes(server), runRoutes(server), logRoutes(server)]) {
    app.use(router.routes());
    app.use(router.allowedMethods());
  }
  return app;
}
