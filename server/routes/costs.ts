import Router from '@koa/router';
import { budgetProblems, COST_GROUPS, costWindow, DEFAULT_COST_ROWS, type Budget, type CostGroup } from '../../api/costs.js';
import { budgetView, deleteBudget, setBudget } from '../../store/budgets.js';
import { CHANNELS } from '../../store/channels.js';
import { costReport } from '../../store/ledger.js';
import { projectAdminFor, projectFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, notFound, readJsonObject } from '../http-errors.js';

/** The ledger's reports and the project's budget (docs/costs.md). */
export function costRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/projects/:project' });

  router.get('/costs', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const by = typeof ctx.query.by === 'string' ? ctx.query.by : 'run';
    if (!(COST_GROUPS as readonly string[]).includes(by)) throw badRequest(`by: expected one of ${COST_GROUPS.join(', ')}, got ${JSON.stringify(by)}`);
    const text = (name: string) => (typeof ctx.query[name] === 'string' ? ctx.query[name] as string : undefined);
    let window: { since: Date; until: Date };
    try {
      window = costWindow({ since: text('since'), month: text('month') }, new Date());
    } catch (error) {
      throw badRequest((error as Error).message);
    }
    const limit = typeof ctx.query.limit === 'string' ? Number(ctx.query.limit) : DEFAULT_COST_ROWS;
    if (!Number.isInteger(limit) || limit < 0) throw badRequest(`limit: expected a whole number of rows (0 for all), got ${JSON.stringify(ctx.query.limit)}`);
    ctx.body = await costReport(db, project, by as CostGroup, window.since, window.until, limit);
  });

  router.get('/budget', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    ctx.body = await budgetView(db, project);
  });

  router.put('/budget', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    const body = await readJsonObject(ctx);
    const problems = budgetProblems(body);
    if (problems.length > 0) throw badRequest(problems.map((p) => `${p.path.join('.') || 'budget'}: ${p.message}`).join('; '), problems);
    await setBudget(db, project.id, body as Budget, 'api');
    // A raised budget lets held runs go on at the scheduler's next pass.
    await db.notify(CHANNELS.budgets);
    await db.notify(CHANNELS.runs);
    ctx.body = await budgetView(db, project);
  });

  router.delete('/budget', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    if (!(await deleteBudget(db, project.id))) throw notFound(`project ${project.name} has no budget`);
    await db.notify(CHANNELS.budgets);
    await db.notify(CHANNELS.runs);
    ctx.status = 204;
  });
  return router;
}
