import Router from '@koa/router';
import type { Context } from 'koa';
import { PassThrough, Readable } from 'node:stream';
import type { LogLine, LogStreamItem, RunLogsPage } from '../../api/objects.js';
import { FINISHED_RUN_STATUSES } from '../../api/status.js';
import { copyJobLogs, type LogCopy } from '../../controllers/log-copy.js';
import { agentOf } from '../../controllers/run-controller.js';
import { instanceAndLastLogSeq, lastLogSeq, logLinesAfter, readLogPage, readLogs } from '../../store/logs.js';
import { isMultiNodeParent, listNodes, nodeCount } from '../../store/nodes.js';
import { getRun, getRunAttempt, type RunRecord } from '../../store/runs.js';
import { isSchedule, latestScheduledRun } from '../../store/schedules.js';
import { replicaForLogs } from '../../store/services.js';
import { runFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, notFound } from '../http-errors.js';
import { asJsonLines, mergeByTime, withNode } from '../node-log-lines.js';
import { cursorQuery, nodeCursorsQuery } from '../query.js';

const AGENT_WAIT_MS = 5000;
const IDLE_WAIT_MS = 300;

/**
 * `GET .../logs?after=N`: a page of lines (RunLogsPage); with `format=jsonl`, every line after N that
 * exists at the moment of the call, streamed as JSON lines; with `follow=true`, lines and status
 * changes (LogStreamItem) until the run ends. A multi-node task answers with every node's lines
 * (each with its `node`), or with one node's as a run's own with `node=RANK`.
 *
 * Logs live in the database once copied from the agent, so they outlive the instance. While a job
 * runs, reading also pulls what the agent has that the database lacks, so a follower sees lines
 * as they are printed.
 */
export function logRoutes(server: ServerContext): Router {
  const router = new Router({ prefix: '/api/projects/:project/runs' });

  router.get('/:name/logs', async (ctx) => {
    const asked = await logsOf(server, ctx);
    if (isMultiNodeParent(asked) && ctx.query.node === undefined) {
      await everyNodeLogs(server, ctx, asked);
      return;
    }
    const run = await nodeOf(server, ctx, asked);
    const after = cursorQuery(ctx, 'after');
    if (ctx.query.follow !== 'true') {
      const last = await lastLineAfterPull(server, run);
      if (ctx.query.format === 'jsonl') {
        ctx.type = 'application/x-ndjson';
        ctx.body = Readable.from(asLines(logLinesAfter(server.db, run.id, after, last)));
        return;
      }
      const { lines, dropped } = await readLogPage(server.db, run.id, after);
      const next = lines.length ? lines[lines.length - 1].seq : after;
      // Another copier (the watch loop) may have stored lines after the pull saw the last one.
      const page: RunLogsPage = { lines, next, last: Math.max(last, next), dropped };
      ctx.body = page;
      return;
    }
    startFollowing(server, ctx, run, async (now) => [{ run: now }], () => after);
  });
  return router;
}

/**
 * Every node's lines of a multi-node task, each with its `node`: with `format=jsonl`, merged by time; with
 * `follow=true`, as they come, with the task's status. `after` is one cursor for every node, or one per node.
 */
async function everyNodeLogs(server: ServerContext, ctx: Context, run: RunRecord): Promise<void> {
  const cursors = nodeCursorsQuery(ctx, 'after');
  if (ctx.query.follow === 'true') {
    startFollowing(server, ctx, run, async (now) => (await listNodes(server.db, now.id)).map((node) => ({ run: node, node: node.replica! })), cursors);
    return;
  }
  if (ctx.query.format !== 'jsonl') {
    throw badRequest(`run ${run.name} runs on ${nodeCount(run.spec)} nodes: ask for one node's page with node=RANK, or for every node's lines with format=jsonl or follow=true`);
  }
  const sources = await Promise.all((await listNodes(server.db, run.id)).map(async (node) => {
    const last = await lastLineAfterPull(server, node);
    return withNode(logLinesAfter(server.db, node.id, cursors(node.replica!), last), node.replica!);
  }));
  ctx.type = 'application/x-ndjson';
  ctx.body = Readable.from(asJsonLines(mergeByTime(sources)));
}

/** `node=RANK`: one node of a multi-node task, whose lines are then read as a run's own; else the run asked for. */
async function nodeOf(server: ServerContext, ctx: Context, run: RunRecord): Promise<RunRecord> {
  const raw = ctx.query.node;
  if (raw === undefined) return run;
  if (typeof raw !== 'string' || !/^\d{1,6}$/.test(raw)) throw badRequest('node: expected a node rank such as 0');
  if (!isMultiNodeParent(run)) throw badRequest(`node: run ${run.name} is a ${run.kind} of one node; node picks a node of a task with nodes above 1`);
  const node = (await listNodes(server.db, run.id)).find((candidate) => candidate.replica === Number(raw));
  if (!node) throw notFound(Number(raw) < nodeCount(run.spec) ? `run ${run.name} has no node ${raw} yet: ${run.statusMessage}` : `run ${run.name} has ${nodeCount(run.spec)} nodes, 0 to ${nodeCount(run.spec) - 1}`);
  return node;
}

/**
 * The run whose lines are read: the run itself, for a service one of its replicas (`replica=N`), and for a
 * schedule the run it submitted last (for a service, one of that run's replicas).
 */
async function logsOf(server: ServerContext, ctx: Context): Promise<RunRecord> {
  const named = (await runFor(server.db, ctx, ctx.params.project!, ctx.params.name!)).run;
  const raw = ctx.query.replica;
  if (raw !== undefined && (typeof raw !== 'string' || !/^\d{1,6}$/.test(raw))) throw badRequest('replica: expected a replica number such as 0');
  const run = isSchedule(named) ? await latestScheduledRun(server.db, named.id) : named;
  if (!run) throw notFound(`scheduled ${named.kind} ${named.name} has submitted no run yet; ${named.statusMessage}`);
  if (run.kind !== 'service' || run.jobId) {
    if (raw !== undefined) throw badRequest(`replica: run ${run.name} is a ${run.kind}, not a service with replicas`);
    return attemptOf(server, ctx, run);
  }
  const replica = await replicaForLogs(server.db, run.id, raw === undefined ? null : Number(raw));
  if (!replica) throw notFound(raw === undefined ? `service ${run.name} has no replica yet` : `service ${run.name} has no replica ${raw}`);
  return replica;
}

/** `attempt=N`: an attempt of a run that its `retry` submitted again (the latest when left out); each keeps its own lines. */
async function attemptOf(server: ServerContext, ctx: Context, run: RunRecord): Promise<RunRecord> {
  const raw = ctx.query.attempt;
  if (raw === undefined) return run;
  if (typeof raw !== 'string' || !/^[1-9]\d{0,5}$/.test(raw)) throw badRequest('attempt: expected an attempt number such as 1');
  const attempt = Number(raw);
  const found = attempt === run.attempt ? run : attempt < run.attempt ? await getRunAttempt(server.db, run, attempt) : null;
  if (!found) throw notFound(`run ${run.name} has ${run.attempt === 1 ? 'one attempt' : `attempts 1 to ${run.attempt}`}`);
  return found;
}

/** A job whose lines a follower reads: a run's own, or a node's, whose lines then carry its rank. */
interface LogSource {
  run: RunRecord;
  node?: number;
}

/** Answers with the NDJSON stream of `run`'s status and the lines of its jobs (`sources`, looked up at each round). */
function startFollowing(server: ServerContext, ctx: Context, run: RunRecord, sources: (now: RunRecord) => Promise<LogSource[]>, after: (rank: number) => number): void {
  const stream = new PassThrough();
  let closed = false;
  ctx.req.on('close', () => { closed = true; });
  ctx.type = 'application/x-ndjson';
  ctx.body = stream;
  void follow(server, run.id, sources, after, stream, () => closed).catch((error) => {
    server.logger.warn(`following logs of ${run.name}: ${(error as Error).message}`);
    stream.end();
  });
}

/**
 * Writes status changes and lines until the run has ended and every line is written. One job is waited on at its
 * agent for its next line; the nodes of a multi-node task are looked at in turn, so that none waits behind another.
 */
async function follow(server: ServerContext, runId: string, sources: (now: RunRecord) => Promise<LogSource[]>, after: (rank: number) => number,
  stream: PassThrough, closed: () => boolean): Promise<void> {
  let full = false;
  const write = (item: LogStreamItem) => {
    if (!stream.write(`${JSON.stringify(item)}\n`)) full = true;
  };
  const cursors = new Map<number, number>();
  // The agent is waited on for a job's next line only once the stored lines are all written: a follow opened on a
  // quiet job with thousands of lines stored otherwise sent each page of them 5 s after the last.
  let caughtUp = false;
  let lastStatus = '';
  const writeStatus = (run: RunRecord) => {
    const status = `${run.status}|${run.statusMessage}`;
    if (status === lastStatus) return;
    write({ type: 'status', status: run.status, statusMessage: run.statusMessage, exitCode: run.exitCode, attempt: run.attempt });
    lastStatus = status;
  };
  while (!closed()) {
    const run = (await getRun(server.db, runId))!;
    const finished = FINISHED_RUN_STATUSES.includes(run.status);
    if (!finished) writeStatus(run);
    const jobs = await sources(run);
    let pulled = 0;
    const round: LogLine[][] = [];
    for (const job of jobs) {
      const rank = job.node ?? 0;
      pulled += finished ? 0 : (await pullFromAgent(server, job.run, jobs.length === 1 && caughtUp ? AGENT_WAIT_MS : 0))?.copied ?? 0;
      const lines = await readLogs(server.db, job.run.id, cursors.get(rank) ?? after(rank));
      round.push(job.node === undefined ? lines : lines.map((line) => ({ ...line, node: job.node })));
      if (lines.length) cursors.set(rank, lines[lines.length - 1].seq);
    }
    // The nodes' lines of one round go out in time order, and at the same moment in rank order.
    const read = round.reduce((count, lines) => count + lines.length, 0);
    caughtUp = read === 0;
    for await (const line of mergeByTime(round.map((lines) => lines[Symbol.iterator]()))) {
      write({ type: 'log', line });
      if (full) {
        // Each wait removes both of its listeners, so that a long follow does not pile up 'close' listeners.
        await new Promise<void>((resolve) => {
          const done = () => {
            stream.off('drain', done);
            stream.off('close', done);
            resolve();
          };
          stream.once('drain', done);
          stream.once('close', done);
        });
        full = false;
      }
    }
    if (finished && read === 0) {
      writeStatus(run);
      break;
    }
    if (pulled === 0 && read === 0) await new Promise((r) => setTimeout(r, IDLE_WAIT_MS));
  }
  stream.end();
}

/** Chunks of JSON lines as one newline-terminated stream. */
async function* asLines(chunks: AsyncIterable<string>): AsyncGenerator<string> {
  for await (const chunk of chunks) if (chunk !== '') yield `${chunk}\n`;
}

/** The last line the database holds once the lines it lacked were pulled from the agent (where there is one). */
async function lastLineAfterPull(server: ServerContext, run: RunRecord): Promise<number> {
  return (await pullFromAgent(server, run, 0))?.lastSeq ?? await lastLogSeq(server.db, run.id);
}

/** Copies one page of lines the database lacks from the agent of a job that runs; null when there is no such agent. */
async function pullFromAgent(server: ServerContext, run: RunRecord, waitMs: number): Promise<LogCopy | null> {
  if (!run.jobId || !run.instanceId || run.status !== 'running' && run.status !== 'terminating') return null;
  const read = await instanceAndLastLogSeq(server.db, run.instanceId, run.id);
  if (!read?.instance.agentUrl || read.instance.status === 'terminated') return null;
  return copyJobLogs(server.db, agentOf(read.instance), run, { maxBytes: server.maxLogBytesPerRun, budgetMs: 0, waitMs, after: read.lastSeq });
}
