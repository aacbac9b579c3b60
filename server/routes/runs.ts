import Router from '@koa/router';
import { isDnsLabel, randomRunName } from '../../api/names.js';
import type { RunPlan } from '../../api/objects.js';
import { describeRequirement, intersectRequirements, normalizeResources, offerSatisfies } from '../../api/resources.js';
import type { RunSpec } from '../../api/spec.js';
import { CHANNELS } from '../../controllers/manager.js';
import { agentOf } from '../../controllers/run-controller.js';
import { place } from '../../controllers/scheduler.js';
import type { OfferListing } from '../../controllers/backend-pool.js';
import { recordEvent } from '../../store/events.js';
import { listActiveFleets } from '../../store/fleets.js';
import { getInstance, toInstance } from '../../store/instances.js';
import type { ProjectRecord } from '../../store/projects.js';
import { deleteRun, getRunByName, getRunView, insertRun, listRunViews, requestRunStop, type RunRecord } from '../../store/runs.js';
import { projectFor, type AuthState } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, conflict, HttpError, notFound, readJsonObject } from '../http-errors.js';
import { checkedFiles, checkedRunSpec } from '../specs.js';

const MAX_GENERATED_NAME_TRIES = 5;

export function runRoutes(server: ServerContext): Router {
  const { db, pool } = server;
  const router = new Router({ prefix: '/api/projects/:project/runs' });

  router.post('/plan', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const spec = checkedRunSpec((await readJsonObject(ctx)).spec);
    ctx.body = await planRun(server, project, spec);
  });

  router.post('/apply', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const body = await readJsonObject(ctx);
    const spec = checkedRunSpec(body.spec);
    const files = checkedFiles(body.files ?? []);
    const requirement = normalizeResources(spec.resources, 'run');
    let run: RunRecord | null = null;
    for (let attempt = 0; !run && attempt < (spec.name ? 1 : MAX_GENERATED_NAME_TRIES); attempt++) {
      const name = spec.name ?? randomRunName();
      run = await insertRun(db, {
        projectId: project.id, userId: (ctx.state as AuthState).user.id, name, kind: spec.type,
        spec: { ...spec, name } as Record<string, unknown>, files, requirement, priority: spec.priority ?? 0,
      });
      if (!run && spec.name) throw conflict(`run ${name} is still active; stop it first (orchestrator stop ${name}) or choose another name`);
    }
    if (!run) throw conflict('could not find a free run name; give the run a name');
    await recordEvent(db, { projectId: project.id, objectKind: 'run', objectId: run.id, objectName: run.name, reason: 'Submitted', message: `${spec.type} submitted (${describeRequirement(requirement)})` });
    await db.notify(CHANNELS.runs);
    ctx.status = 201;
    ctx.body = await getRunView(db, run.id);
  });

  router.get('/', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    ctx.body = await listRunViews(db, project.id, ctx.query.all === 'true');
  });

  router.get('/:name', async (ctx) => {
    const { run } = await runFor(server, ctx, ctx.params.project, ctx.params.name);
    ctx.body = await getRunView(db, run.id);
  });

  router.post('/:name/stop', async (ctx) => {
    const { project, run } = await runFor(server, ctx, ctx.params.project, ctx.params.name);
    const body = await readJsonObject(ctx);
    if (body.abort !== undefined && typeof body.abort !== 'boolean') throw badRequest('abort: expected true or false');
    await requestRunStop(db, run.id, body.abort === true);
    await recordEvent(db, { projectId: project.id, objectKind: 'run', objectId: run.id, objectName: run.name, reason: body.abort ? 'Aborting' : 'Stopping', message: 'requested by the user' });
    await db.notify(CHANNELS.runs);
    ctx.status = 202;
    ctx.body = await getRunView(db, run.id);
  });

  router.delete('/:name', async (ctx) => {
    const { run } = await runFor(server, ctx, ctx.params.project, ctx.params.name);
    if (!(await deleteRun(db, run.id))) throw conflict(`run ${run.name} is ${run.status}; stop it before deleting it`);
    ctx.status = 204;
  });

  router.get('/:name/metrics', async (ctx) => {
    const { run } = await runFor(server, ctx, ctx.params.project, ctx.params.name);
    const instance = run.instanceId ? await getInstance(db, run.instanceId) : null;
    if (run.status !== 'running' || !instance?.agentUrl) throw new HttpError(409, 'not_running', `run ${run.name} is ${run.status}; metrics exist only while it runs`);
    ctx.body = await agentOf(instance).metrics();
  });
  return router;
}

export async function runFor(server: ServerContext, ctx: Parameters<typeof projectFor>[1], projectName: string, runName: string): Promise<{ project: ProjectRecord; run: RunRecord }> {
  const project = await projectFor(server.db, ctx, projectName);
  const run = isDnsLabel(runName) ? await getRunByName(server.db, project.id, runName) : null;
  if (!run) throw notFound(`run ${runName} not found in project ${project.name}`);
  return { project, run };
}

/** What applying the run would do now: the fleets it fits, the idle instance it would take, the best offers. */
async function planRun(server: ServerContext, project: ProjectRecord, spec: RunSpec): Promise<RunPlan> {
  const { db, pool } = server;
  const requirement = normalizeResources(spec.resources, 'run');
  const fleets = await listActiveFleets(db, project.id);
  const instances = (await db.query(`SELECT * FROM instances WHERE project_id = $1 AND status <> 'terminated'`, [project.id])).map(toInstance);
  const listings = new Map<string, OfferListing>();
  for (const fleet of fleets) listings.set(fleet.id, await pool.offers(project.id, fleet.backends, { fresh: true }));
  const placement = place({ requirement }, fleets, instances, listings);
  const candidates = fleets.filter((f) => intersectRequirements(f.requirement, requirement) !== null);
  const offers = candidates.flatMap((fleet) => {
    const both = intersectRequirements(fleet.requirement, requirement)!;
    return (listings.get(fleet.id)?.offers ?? []).filter((o) => offerSatisfies(o, both)).map((o) => ({ ...o, fleet: fleet.name }));
  }).sort((a, b) => a.pricePerHour - b.pricePerHour).slice(0, 5);
  const existing = spec.name ? await getRunByName(db, project.id, spec.name) : null;
  const idle = placement.kind === 'instance' && placement.ready ? placement.instance : null;
  return {
    action: existing ? 'replace' : 'create',
    name: spec.name ?? null,
    requirement: describeRequirement(requirement),
    fleets: candidates.map((f) => f.name),
    idleInstance: idle ? { name: idle.name, fleet: placement.kind === 'instance' ? placement.fleet.name : '', gpu: idle.offer!.gpu, pricePerHour: idle.offer!.pricePerHour } : null,
    offers,
    offerErrors: [...new Set([...listings.values()].flatMap((listing) => listing.errors))],
    problem: placement.kind === 'fail' || placement.kind === 'wait' ? placement.message : null,
  };
}
