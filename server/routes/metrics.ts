import Router from '@koa/router';
import type { Context, Next } from 'koa';
import { Counter, Gauge, Registry } from 'prom-client';
import { spendFigures } from '../../store/ledger.js';
import { instanceCounts, liveServices, runCounts } from '../../store/metrics.js';
import { serviceWindows } from '../../store/service-stats.js';
import { authMiddleware, requireAdmin } from '../auth.js';
import type { ServerContext } from '../context.js';
import { serviceFigures } from '../service-figures.js';

/** Services are measured over the last minute at each scrape: a rate Prometheus can graph without keeping counters of its own. */
const METRICS_WINDOW_SECONDS = 60;

async function adminOnly(ctx: Context, next: Next): Promise<void> {
  requireAdmin(ctx);
  await next();
}

/** Gauges in a registry of their own, filled from the database at each scrape: every server answers alike. */
async function scrape(server: ServerContext): Promise<Registry> {
  const { db } = server;
  const registry = new Registry();
  const gauge = (name: string, help: string, labelNames: string[]) => new Gauge({ name, help, labelNames, registers: [registry] });
  const runs = gauge('orchestrator_runs', 'Runs by status (a service counts once, whatever its replicas)', ['project', 'kind', 'status']);
  const instances = gauge('orchestrator_instances', 'Instances by status', ['project', 'backend', 'status']);
  const requests = gauge('orchestrator_service_requests_per_second', 'Requests per second through the gateway over the last minute', ['project', 'run']);
  const errors = gauge('orchestrator_service_errors_per_second', 'Answers 5xx and failed exchanges per second over the last minute', ['project', 'run']);
  const latency = gauge('orchestrator_service_latency_seconds', 'Latency quantiles over the last minute (upper bounds of histogram buckets)', ['project', 'run', 'quantile']);
  const inflight = gauge('orchestrator_service_inflight', 'The most requests in flight at once during the last minute, held ones included', ['project', 'run']);
  const replicas = gauge('orchestrator_service_replicas', 'Replicas ready (in rotation) and desired', ['project', 'run', 'state']);

  const pricePerHour = gauge('orchestrator_price_per_hour_dollars', 'Dollars per hour of the instances the ledger counts now (from creation at the backend to confirmed termination)', ['project', 'backend']);
  const spent = new Counter({ name: 'orchestrator_spent_dollars_total', help: 'Dollars the ledger has counted, all time', labelNames: ['project', 'backend'], registers: [registry] });

  const [runRows, instanceRows, services, spend] = await Promise.all([runCounts(db), instanceCounts(db), liveServices(db), spendFigures(db)]);
  for (const figures of spend) {
    pricePerHour.set({ project: figures.project, backend: figures.backend }, figures.perHour);
    spent.inc({ project: figures.project, backend: figures.backend }, figures.spent);
  }
  for (const { project, kind, status, count } of runRows) runs.set({ project, kind, status }, count);
  for (const { project, backend, status, count } of instanceRows) instances.set({ project, backend, status }, count);
  const windows = await serviceWindows(db, services.map((s) => s.id), METRICS_WINDOW_SECONDS);
  for (const service of services) {
    const labels = { project: service.project, run: service.run };
    const figures = serviceFigures(windows.get(service.id), METRICS_WINDOW_SECONDS);
    requests.set(labels, figures.requestsPerSecond);
    errors.set(labels, figures.errors / METRICS_WINDOW_SECONDS);
    for (const [quantile, ms] of [['0.5', figures.p50Ms], ['0.99', figures.p99Ms]] as const) {
      if (ms !== null) latency.set({ ...labels, quantile }, ms / 1000);
    }
    inflight.set(labels, figures.inflight);
    replicas.set({ ...labels, state: 'ready' }, service.readyReplicas);
    replicas.set({ ...labels, state: 'desired' }, service.desiredReplicas);
  }
  return registry;
}

/** GET /metrics in Prometheus' text format: for global admins, or for anyone when config.yml makes it public. */
export function metricsRoutes(server: ServerContext): Router {
  const router = new Router();
  const guard = server.metricsPublic ? [] : [authMiddleware(server.db), adminOnly];
  router.get('/metrics', ...guard, async (ctx) => {
    const registry = await scrape(server);
    ctx.type = registry.contentType;
    ctx.body = await registry.metrics();
  });
  return router;
}
