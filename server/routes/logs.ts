import Router from '@koa/router';
import type { Context } from 'koa';
import { PassThrough, Readable } from 'node:stream';
import type { LogStreamItem, RunLogsPage } from '../../api/objects.js';
import { FINISHED_RUN_STATUSES } from '../../api/status.js';
import { copyJobLogs } from '../../controllers/log-copy.js';
import { agentOf } from '../../controllers/run-controller.js';
import { getInstance } from '../../store/instances.js';
import { lastLogSeq, logLinesAfter, readLogPage, readLogs } from '../../store/logs.js';
import { getRun, type RunRecord } from '../../store/runs.js';
import { isSchedule, latestScheduledRun } from '../../store/schedules.js';
import { replicaForLogs } from '../../store/services.js';
import type { ServerContext } from '../context.js';
import { badRequest, notFound } from '../http-errors.js';
import { cursorQuery } from '../query.js';
import { runFor } from './runs.js';

const AGENT_WAIT_MS = 5000;
const IDLE_WAIT_MS = 300;

/**
 * `GET .../logs?after=N`: a page of lines (RunLogsPage); with `format=jsonl`, every line after N that
 * exists at the moment of the call, streamed as JSON lines; with `follow=true`, lines and status
 * changes (LogStreamItem) until the run ends.
 *
 * Logs live in the database once copied from the agent, so they outlive the instance. While a job
 * runs, reading also pulls what the agent has that the database lacks, so a follower sees lines
 * as they are printed.
 */
export function logRoutes(server: ServerContext): Router {
  const router = new Router({ prefix: '/api/projects/:project/runs' });

  router.get('/:name/logs', async (ctx) => {
    const run = await logsOf(server, ctx);
    const after = cursorQuery(ctx, 'after');
    if (ctx.query.follow !== 'true') {
      await pullFromAgent(server, run, 0);
      const last = await lastLogSeq(server.db, run.id);
      if (ctx.query.format === 'jsonl') {
        ctx.type = 'application/x-ndjson';
        ctx.body = Readable.from(asLines(logLinesAfter(server.db, run.id, after, last)));
        return;
      }
      const { lines, dropped } = await readLogPage(server.db, run.id, after);
      const page: RunLogsPage = { lines, next: lines.length ? lines[lines.length - 1].seq : after, last, dropped };
      ctx.body = page;
      return;
    }
    const stream = new PassThrough();
    let closed = false;
    ctx.req.on('close', () => { closed = true; });
    ctx.type = 'application/x-ndjson';
    ctx.body = stream;
    void follow(server, run.id, after, stream, () => closed).catch((error) => {
      server.logger.warn(`following logs of ${run.name}: ${(error as Error).message}`);
      stream.end();
    });
  });
  return router;
}

/**
 * The run whose lines are read: the run itself, for a service one of its replicas (`replica=N`), and for a
 * scheduled task the run it submitted last.
 */
async function logsOf(server: ServerContext, ctx: Context): Promise<RunRecord> {
  const { run } = await runFor(server, ctx, ctx.params.project!, ctx.params.name!);
  const raw = ctx.query.replica;
  if (raw !== undefined && (typeof raw !== 'string' || !/^\d{1,6}$/.test(raw))) throw badRequest('replica: expected a replica number such as 0');
  if (isSchedule(run)) {
    if (raw !== undefined) throw badRequest(`replica: ${run.name} is a scheduled task, not a service with replicas`);
    const latest = await latestScheduledRun(server.db, run.id);
    if (!latest) throw notFound(`scheduled task ${run.name} has submitted no run yet; ${run.statusMessage}`);
    return latest;
  }
  if (run.kind !== 'service' || run.jobId) {
    if (raw !== undefined) throw badRequest(`replica: run ${run.name} is a ${run.kind}, not a service with replicas`);
    return run;
  }
  const replica = await replicaForLogs(server.db, run.id, raw === undefined ? null : Number(raw));
  if (!replica) throw notFound(raw === undefined ? `service ${run.name} has no replica yet` : `service ${run.name} has no replica ${raw}`);
  return replica;
}

async function follow(server: ServerContext, runId: string, after: number, stream: PassThrough, closed: () => boolean): Promise<void> {
  let full = false;
  const write = (item: LogStreamItem) => {
    if (!stream.write(`${JSON.stringify(item)}\n`)) full = true;
  };
  let cursor = after;
  let lastStatus = '';
  const writeStatus = (run: RunRecord) => {
    const status = `${run.status}|${run.statusMessage}`;
    if (status === lastStatus) return;
    write({ type: 'status', status: run.status, statusMessage: run.statusMessage, exitCode: run.exitCode });
    lastStatus = status;
  };
  while (!closed()) {
    const run = (await getRun(server.db, runId))!;
    const finished = FINISHED_RUN_STATUSES.includes(run.status);
    if (!finished) writeStatus(run);
    const pulled = finished ? 0 : await pullFromAgent(server, run, AGENT_WAIT_MS);
    const lines = await readLogs(server.db, runId, cursor);
    for (const line of lines) write({ type: 'log', line });
    if (lines.length) cursor = lines[lines.length - 1].seq;
    if (full) {
      await new Promise((resolve) => { stream.once('drain', resolve); stream.once('close', resolve); });
      full = false;
    }
    if (finished && lines.length === 0) {
      writeStatus(run);
      break;
    }
    if (pulled === 0 && lines.length === 0) await new Promise((r) => setTimeout(r, IDLE_WAIT_MS));
  }
  stream.end();
}

/** Chunks of JSON lines as one newline-terminated stream. */
async function* asLines(chunks: AsyncIterable<string>): AsyncGenerator<string> {
  for await (const chunk of chunks) if (chunk !== '') yield `${chunk}\n`;
}

/** Copies one page of lines the database lacks from the agent; how many (0 when the agent is not there). */
async function pullFromAgent(server: ServerContext, run: RunRecord, waitMs: number): Promise<number> {
  if (!run.jobId || !run.instanceId || run.status !== 'running' && run.status !== 'terminating') return 0;
  const instance = await getInstance(server.db, run.instanceId);
  if (!instance?.agentUrl || instance.status === 'terminated') return 0;
  const { copied } = await copyJobLogs(server.db, agentOf(instance), run, { maxBytes: server.maxLogBytesPerRun, budgetMs: 0, waitMs });
  return copied;
}
