import Router from '@koa/router';
import { randomBytes } from 'node:crypto';
import { connect } from 'node:net';
import { eventPatternProblem, type CreatedWebhook } from '../../api/webhooks.js';
import { CHANNELS } from '../../store/channels.js';
import { deleteWebhook, getWebhook, insertWebhook, listDeliveries, listWebhooks } from '../../store/webhooks.js';
import { projectAdminFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, HttpError, notFound, readJsonObject } from '../http-errors.js';

/** How long adding a webhook waits to open a connection to its receiver. */
const REACH_TIMEOUT_MS = 5000;
const DELIVERIES_SHOWN = 100;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function checkedUrl(value: unknown): URL {
  if (typeof value !== 'string') throw badRequest('url: expected an http:// or https:// URL');
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw badRequest(`url: "${value}" is not a URL; expected one such as https://example.com/hooks/orchestrator`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw badRequest(`url: expected http:// or https://, got ${url.protocol}//`);
  if (url.username || url.password) throw badRequest('url: a user or password in the URL is not sent; the signature (X-Orchestrator-Signature) is how a receiver knows the sender');
  return url;
}

function checkedPatterns(value: unknown): string[] {
  if (!Array.isArray(value) || value.length === 0 || value.some((p) => typeof p !== 'string')) {
    throw badRequest('events: expected a list of event patterns such as ["run.failed", "instance.*"]');
  }
  const problems = (value as string[]).map(eventPatternProblem).filter((problem): problem is string => problem !== null);
  if (problems.length > 0) throw badRequest(`events: ${problems.join('; ')}`);
  return [...new Set(value as string[])];
}

/**
 * Whether the receiver takes connections: a URL whose host does not resolve or refuses is a mistake to say now,
 * rather than a day of failed deliveries later. Only the TCP connection is tried; no event is sent.
 */
async function checkReachable(url: URL): Promise<void> {
  const port = Number(url.port || (url.protocol === 'https:' ? 443 : 80));
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const problem = await new Promise<string | null>((resolve) => {
    const socket = connect({ host, port, timeout: REACH_TIMEOUT_MS });
    socket.once('connect', () => { socket.destroy(); resolve(null); });
    socket.once('timeout', () => { socket.destroy(); resolve(`no connection within ${REACH_TIMEOUT_MS / 1000}s`); });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
  });
  if (problem) throw new HttpError(422, 'unreachable', `url: cannot connect to ${host}:${port} (${problem}); nothing was stored`);
}

/** A project's webhooks and their delivery logs: for the project's admins (and global admins) only. */
export function webhookRoutes(server: ServerContext): Router {
  const { db, secrets } = server;
  const router = new Router({ prefix: '/api/projects/:project/webhooks' });

  const webhookFor = async (ctx: Parameters<typeof projectAdminFor>[1]) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project!);
    const id = ctx.params.id!;
    const hook = UUID.test(id) ? await getWebhook(db, project.id, id) : null;
    if (!hook) throw notFound(`webhook ${id} not found in project ${project.name}`);
    return { project, hook };
  };

  router.get('/', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    ctx.body = await listWebhooks(db, project.id);
  });

  router.post('/', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    const body = await readJsonObject(ctx);
    const extra = Object.keys(body).filter((key) => key !== 'url' && key !== 'events');
    if (extra.length > 0) throw badRequest(`unknown field ${extra[0]}; expected {"url": "...", "events": [...]}`);
    const url = checkedUrl(body.url);
    const events = checkedPatterns(body.events);
    await checkReachable(url);
    const secret = `whsec_${randomBytes(32).toString('base64url')}`;
    const hook = await insertWebhook(db, secrets, project.id, { url: url.toString(), events, secret });
    await db.notify(CHANNELS.webhooks);
    ctx.status = 201;
    ctx.set('cache-control', 'no-store');
    ctx.body = { ...hook, secret } satisfies CreatedWebhook;
  });

  router.delete('/:id', async (ctx) => {
    const { project, hook } = await webhookFor(ctx);
    await deleteWebhook(db, project.id, hook.id);
    ctx.status = 204;
  });

  router.get('/:id/deliveries', async (ctx) => {
    const { hook } = await webhookFor(ctx);
    ctx.body = await listDeliveries(db, hook.id, DELIVERIES_SHOWN);
  });
  return router;
}
