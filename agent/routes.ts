import Router from '@koa/router';
import type { AgentHealth, JobStatus } from '../api/agent.js';
import type { GpuInfo } from '../api/offer.js';
import { HttpError } from './http-errors.js';
import type { JobManager } from './jobs.js';
import { readJsonBody } from './json-body.js';
import type { MetricsSampler } from './metrics.js';
import type { MetricsHistory } from './metrics-history.js';
import type { JobPorts, PortForward } from './port-forward.js';
import { answerLogsPage, logsQuery } from './logs-page.js';
import { jobsChangesAnswer } from './jobs-changes.js';
import { jobsWatchAnswer } from './jobs-watch.js';
import { parseJobsChanges, parseJobsWatch, parseStopRequest, parseSubmission } from './requests.js';
import type { RuntimeKind } from './runtime.js';
import type { SshAccess } from './ssh/ssh-access.js';

export interface RouteDependencies {
  jobs: JobManager;
  metrics: MetricsSampler;
  history: MetricsHistory;
  ports: JobPorts;
  portForward: PortForward;
  ssh: SshAccess;
  identity: { version: string; instanceId: string; runtime: RuntimeKind; gpu: GpuInfo; sshHostKey: string };
}

function unknownJob(jobId: string): HttpError {
  return new HttpError(404, 'job_not_found', `no job ${jobId}`);
}

export function agentRoutes({ jobs, metrics, history, ports, portForward, ssh, identity }: RouteDependencies): Router {
  const router = new Router({ prefix: '/api' });
  const reported = (status: JobStatus): JobStatus => ({ ...status, forwarding: portForward.forwarding(status.jobId), ...ssh.activityOf(status.jobId) });

  router.get('/health', (ctx) => {
    const health: AgentHealth = { ok: true, ...identity, jobs: jobs.ids() };
    ctx.body = health;
  });

  router.get('/metrics', async (ctx) => {
    ctx.body = await metrics.sample();
  });

  router.post('/jobs', async (ctx) => {
    const submission = parseSubmission(await readJsonBody(ctx));
    const known = jobs.status(submission.jobId);
    const { created, status } = known ? { created: false, status: known } : jobs.submit(await ports.submitted(submission));
    ctx.status = created ? 201 : 200;
    ctx.body = reported(status);
  });

  router.post('/jobs/watch', async (ctx) => {
    const request = parseJobsWatch(await readJsonBody(ctx));
    ctx.body = jobsWatchAnswer(request, (jobId) => {
      const status = jobs.status(jobId);
      return status && { status: reported(status), page: (after, maxBytes) => jobs.page(jobId, after, maxBytes)! };
    });
  });

  router.post('/jobs/changes', async (ctx) => {
    const request = parseJobsChanges(await readJsonBody(ctx));
    ctx.body = await jobsChangesAnswer(request, (jobId) => jobs.status(jobId)?.state, jobs.stateChanges);
  });

  router.get('/jobs/:id', (ctx) => {
    const status = jobs.status(ctx.params.id!);
    if (!status) throw unknownJob(ctx.params.id!);
    ctx.body = reported(status);
  });

  router.get('/jobs/:id/metrics/history', (ctx) => {
    const status = jobs.status(ctx.params.id!);
    if (!status) throw unknownJob(ctx.params.id!);
    ctx.body = history.of(status);
  });

  router.get('/jobs/:id/logs', async (ctx) => {
    const { after, wait } = logsQuery(ctx);
    const page = await jobs.logs(ctx.params.id!, after, wait);
    if (page === undefined) throw unknownJob(ctx.params.id!);
    answerLogsPage(ctx, page);
  });

  router.post('/jobs/:id/stop', async (ctx) => {
    const request = parseStopRequest(await readJsonBody(ctx));
    const status = jobs.stop(ctx.params.id!, request);
    if (!status) throw unknownJob(ctx.params.id!);
    ctx.body = reported(status);
  });

  router.delete('/jobs/:id', async (ctx) => {
    const outcome = await jobs.remove(ctx.params.id!);
    if (outcome === 'unknown') throw unknownJob(ctx.params.id!);
    if (outcome === 'running') throw new HttpError(409, 'job_running', `job ${ctx.params.id} has not finished; stop it first`);
    await ports.removed(ctx.params.id!);
    ssh.forget(ctx.params.id!);
    ctx.status = 204;
  });

  return router;
}
