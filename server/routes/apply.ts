import Router from '@koa/router';
import type { ApplyResult, FleetPlan } from '../../api/objects.js';
import { describeRequirement } from '../../api/resources.js';
import { CHANNELS } from '../../store/channels.js';
import type { Queryable } from '../../store/db.js';
import { recordEvent } from '../../store/events.js';
import { applyFleet, fleetView, type FleetDesired, type FleetRecord } from '../../store/fleets.js';
import { listInstanceViews } from '../../store/instances.js';
import type { ProjectRecord } from '../../store/projects.js';
import { getRunView } from '../../store/run-views.js';
import type { RunRecord } from '../../store/runs.js';
import { projectFor, type AuthState } from '../auth.js';
import type { ServerContext } from '../context.js';
import { HttpError, readJsonObject } from '../http-errors.js';
import { checkedApplyItems } from '../specs.js';
import { submitRun } from './runs.js';

type Written =
  | { kind: 'fleet'; fleet: FleetRecord; action: FleetPlan['action'] }
  | { kind: 'run'; run: RunRecord };

/** Writes a fleet's new generation (or the fleet) and its event; nothing when the spec is unchanged. */
async function writeFleet(q: Queryable, project: ProjectRecord, desired: FleetDesired): Promise<Written> {
  const { fleet, created, changed } = await applyFleet(q, project.id, desired);
  if (changed) {
    await recordEvent(q, { projectId: project.id, objectKind: 'fleet', objectId: fleet.id, objectName: fleet.name, reason: created ? 'Created' : 'Updated', message: `generation ${fleet.generation}: nodes ${desired.nodesMin}..${desired.nodesMax ?? ''}, ${describeRequirement(desired.requirement)}` });
  }
  return { kind: 'fleet', fleet, action: created ? 'create' : changed ? 'update' : 'unchanged' };
}

/**
 * `POST /api/projects/:project/apply {items: [{spec, files?}]}`: fleets and runs together, all or nothing.
 * Every item is validated first (one 422 lists every problem); then all are written in one transaction,
 * so a run name still in use (409) leaves no fleet behind either. Controllers hear of it after the commit.
 */
export function applyRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/projects/:project' });

  router.post('/apply', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const items = checkedApplyItems(await readJsonObject(ctx), project);
    const userId = (ctx.state as AuthState).user.id;
    const written = await db.transaction(async (tx) => {
      const done: Written[] = [];
      for (const [index, item] of items.entries()) {
        try {
          done.push(item.kind === 'fleet' ? await writeFleet(tx, project, item.desired) : { kind: 'run', run: await submitRun(tx, project, userId, item.spec, item.files, item.repos) });
        } catch (error) {
          if (error instanceof HttpError) throw new HttpError(error.status, error.code, `nothing was applied: items[${index}]: ${error.message}`, { index });
          throw error;
        }
      }
      return done;
    });
    const fleetsChanged = written.some((w) => w.kind === 'fleet' && w.action !== 'unchanged');
    if (fleetsChanged) await db.notify(CHANNELS.fleets);
    if (fleetsChanged || written.some((w) => w.kind === 'run')) await db.notify(CHANNELS.runs);
    const result: ApplyResult = {
      items: await Promise.all(written.map(async (w) => w.kind === 'run'
        ? { kind: 'run' as const, run: await getRunView(db, w.run.id) }
        : { kind: 'fleet' as const, action: w.action, fleet: fleetView(w.fleet, project.name, await listInstanceViews(db, project.id, { fleetId: w.fleet.id, includeTerminated: false })) })),
    };
    ctx.status = written.some((w) => w.kind === 'run' || w.action === 'create') ? 201 : 200;
    ctx.body = result;
  });
  return router;
}
