import Koa from 'koa';
import { authenticateEveryRoute } from './auth.js';
import type { ServerContext } from './context.js';
import { consoleMiddleware } from './console-assets.js';
import { errorMiddleware } from './http-errors.js';
import { applyRoutes } from './routes/apply.js';
import { costRoutes } from './routes/costs.js';
import { fleetRoutes } from './routes/fleets.js';
import { gatewayApiRoutes } from './routes/gateway-api.js';
import { gatewayRoutes } from './routes/gateways.js';
import { liveRoutes } from './routes/live.js';
import { logRoutes } from './routes/logs.js';
import { runMetricsRoutes } from './routes/run-metrics.js';
import { metricsRoutes } from './routes/metrics.js';
import { projectRoutes } from './routes/project.js';
import { runRoutes } from './routes/runs.js';
import { secretRoutes } from './routes/secrets.js';
import { sessionRoutes } from './routes/session.js';
import { serviceRoutes } from './routes/services.js';
import { sshKeyRoutes } from './routes/ssh-keys.js';
import { webhookRoutes } from './routes/webhooks.js';

/** The management API: JSON under /api, one error shape, a bearer token (or the console's session) on every route; the console on the rest. */
export function createApp(server: ServerContext): Koa {
  const app = new Koa();
  app.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'ERR_STREAM_PREMATURE_CLOSE' || error.code === 'ECONNRESET' || error.code === 'EPIPE') return;
    server.logger.error(`http: ${error.stack ?? error.message}`);
  });
  app.use(errorMiddleware(server.logger));
  app.use(consoleMiddleware(server.consoleDir));
  for (const router of [projectRoutes(server), applyRoutes(server), fleetRoutes(server), gatewayRoutes(server), runRoutes(server), runMetricsRoutes(server), logRoutes(server), serviceRoutes(server), sshKeyRoutes(server), secretRoutes(server), liveRoutes(server), webhookRoutes(server), costRoutes(server)]) {
    authenticateEveryRoute(router, server.db);
    app.use(router.routes());
    app.use(router.allowedMethods());
  }
  // Guarded by their own rules: gateway processes call with their own tokens; metrics need a global admin, or
  // no one when config.yml makes them public; the console signs in with a token and then holds a session.
  for (const router of [gatewayApiRoutes(server), metricsRoutes(server), sessionRoutes(server)]) {
    app.use(router.routes());
    app.use(router.allowedMethods());
  }
  return app;
}
