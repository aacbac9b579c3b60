import Router from '@koa/router';
import { PassThrough } from 'node:stream';
import type { LogLine, LogStreamItem } from '../../api/objects.js';
import { FINISHED_RUN_STATUSES } from '../../api/status.js';
import { agentOf } from '../../controllers/run-controller.js';
import { getInstance } from '../../store/instances.js';
import { appendLogs, readLogs } from '../../store/logs.js';
import { getRun, type RunRecord } from '../../store/runs.js';
import type { ServerContext } from '../context.js';
import { cursorQuery } from '../query.js';
import { runFor } from './runs.js';

const AGENT_WAIT_MS = 5000;
const IDLE_WAIT_MS = 300;

/**
 * Logs live in the database once copied from the agent, so they outlive the instance. While a job
 * runs, reading also pulls what the agent has that the database lacks, so a follower sees lines
 * as they are printed.
 */
export function logRoutes(server: ServerContext): Router {
  const router = new Router({ prefix: '/api/projects/:project/runs' });

  router.get('/:name/logs', async (ctx) => {
    const { run } = await runFor(server, ctx, ctx.params.project, ctx.params.name);
    const after = cursorQuery(ctx, 'after');
    if (ctx.query.follow !== 'true') {
      await pullFromAgent(server, run, after, 0);
      const lines = await readLogs(server.db, run.id, after);
      ctx.body = { lines, next: lines.length ? lines[lines.length - 1].seq : after };
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

async function follow(server: ServerContext, runId: string, after: number, stream: PassThrough, closed: () => boolean): Promise<void> {
  const write = (item: LogStreamItem) => stream.write(`${JSON.stringify(item)}\n`);
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
    const pulled = finished ? 0 : await pullFromAgent(server, run, cursor, AGENT_WAIT_MS);
    const lines = await readLogs(server.db, runId, cursor);
    for (const line of lines) write({ type: 'log', line });
    if (lines.length) cursor = lines[lines.length - 1].seq;
    if (finished && lines.length === 0) {
      writeStatus(run);
      break;
    }
    if (pulled === 0 && lines.length === 0) await new Promise((r) => setTimeout(r, IDLE_WAIT_MS));
  }
  stream.end();
}

/** Copies the agent's lines after `after` into the database; how many it copied (0 when the agent is not there). */
async function pullFromAgent(server: ServerContext, run: RunRecord, after: number, waitMs: number): Promise<number> {
  if (!run.jobId || !run.instanceId || run.status !== 'running' && run.status !== 'terminating') return 0;
  const instance = await getInstance(server.db, run.instanceId);
  if (!instance?.agentUrl || instance.status === 'terminated') return 0;
  const page = await agentOf(instance).logs(run.jobId, after, waitMs).catch(() => null);
  if (!page || page.entries.length === 0) return 0;
  await appendLogs(server.db, run.id, page.entries as LogLine[]);
  return page.entries.length;
}
