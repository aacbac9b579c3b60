import Router from '@koa/router';
import type { Context } from 'koa';
import { AgentError, AgentUnreachableError, type AgentClient } from '../../agent/client.js';
import { agentOf } from '../../controllers/run-controller.js';
import { getInstance } from '../../store/instances.js';
import { isMultiNodeParent, listNodes } from '../../store/nodes.js';
import type { RunRecord } from '../../store/runs.js';
import { listReplicas, replicaForLogs } from '../../store/services.js';
import { runFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, HttpError, notFound } from '../http-errors.js';

/**
 * `GET .../metrics`: CPU, memory and GPU use of the instance a running job is on. A service's are its
 * replicas' (`replica=N`) and a multi-node task's its nodes' (`node=RANK`): without one, 409 names those to ask.
 * `GET .../metrics/history`: the samples the job's agent took in the background while it ran (the last hour), oldest
 * first, for a chart that opens with the past.
 */
export function runMetricsRoutes(server: ServerContext): Router {
  const router = new Router({ prefix: '/api/projects/:project/runs' });
  router.get('/:name/metrics', async (ctx) => {
    const { agent } = await runningJob(server, ctx);
    ctx.body = await fromAgent(() => agent.metrics());
  });
  router.get('/:name/metrics/history', async (ctx) => {
    const { agent, jobId } = await runningJob(server, ctx);
    ctx.body = await fromAgent(() => agent.metricsHistory(jobId));
  });
  return router;
}

/** The agent of the instance that the measured job runs on, and the job's id there; 409 when the job does not run. */
async function runningJob(server: ServerContext, ctx: Context): Promise<{ agent: AgentClient; jobId: string }> {
  const { run } = await runFor(server.db, ctx, ctx.params.project!, ctx.params.name!);
  const { job, label } = await measuredJob(server, ctx, run);
  const instance = job.instanceId ? await getInstance(server.db, job.instanceId) : null;
  if (job.status !== 'running' || !instance?.agentUrl || !job.jobId) throw new HttpError(409, 'not_running', `${label} is ${job.status}; metrics exist only while it runs`);
  return { agent: agentOf(instance), jobId: job.jobId };
}

/** The agent's answer; 502 when it gave none or an error, since the fault is neither the client's nor the server's. */
async function fromAgent<T>(ask: () => Promise<T>): Promise<T> {
  try {
    return await ask();
  } catch (error) {
    if (error instanceof AgentUnreachableError) throw new HttpError(502, 'agent_unreachable', `the instance's agent did not answer: ${error.message}`);
    if (error instanceof AgentError) throw new HttpError(502, 'agent_error', `the instance's agent failed: ${error.message}`);
    throw error;
  }
}

/** The job whose instance is measured, and how messages name it. */
async function measuredJob(server: ServerContext, ctx: Context, run: RunRecord): Promise<{ job: RunRecord; label: string }> {
  const replica = wholeNumber(ctx, 'replica', 'a replica number');
  const node = wholeNumber(ctx, 'node', 'a node rank');
  const isService = run.kind === 'service' && !run.jobId;
  if (replica !== undefined && !isService) throw badRequest(`replica: run ${run.name} is a ${run.kind}, not a service with replicas`);
  if (node !== undefined && !isMultiNodeParent(run)) throw badRequest(`node: run ${run.name} is a ${run.kind} of one node; node picks a node of a task with nodes above 1`);
  if (isService) {
    if (replica === undefined) throw await askFor(server, run, 'replica');
    const job = await replicaForLogs(server.db, run.id, replica);
    if (!job) throw notFound(`service ${run.name} has no replica ${replica}`);
    return { job, label: `replica ${replica} of ${run.name}` };
  }
  if (isMultiNodeParent(run)) {
    if (node === undefined) throw await askFor(server, run, 'node');
    const job = (await listNodes(server.db, run.id)).find((candidate) => candidate.replica === node);
    if (!job) throw notFound(`run ${run.name} has no node ${node}`);
    return { job, label: `node ${node} of ${run.name}` };
  }
  return { job: run, label: `run ${run.name}` };
}

/** 409 naming the replicas (or nodes) that run, whose metrics can be asked for one at a time. */
async function askFor(server: ServerContext, run: RunRecord, part: 'replica' | 'node'): Promise<HttpError> {
  const jobs = part === 'node' ? await listNodes(server.db, run.id) : await listReplicas(server.db, run.id);
  const running = [...new Set(jobs.filter((job) => job.status === 'running').map((job) => job.replica))];
  const what = part === 'node' ? `a task of ${jobs.length} nodes` : 'a service';
  const which = running.length === 0 ? `none of them runs now (run ${run.name} is ${run.status})` : `running: ${running.join(', ')}`;
  return new HttpError(409, `${part}_needed`, `run ${run.name} is ${what}: metrics are each ${part}'s; ask for one with ${part}=N (${which})`);
}

function wholeNumber(ctx: Context, name: string, what: string): number | undefined {
  const raw = ctx.query[name];
  if (raw === undefined) return undefined;
  if (typeof raw !== 'string' || !/^\d{1,6}$/.test(raw)) throw badRequest(`${name}: expected ${what} such as 0`);
  return Number(raw);
}
