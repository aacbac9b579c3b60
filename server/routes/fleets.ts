import { isDeepStrictEqual } from 'node:util';
import Router from '@koa/router';
import { isDnsLabel } from '../../api/names.js';
import type { FleetPlan } from '../../api/objects.js';
import { describeRequirement, describeRequirementInWords, offerSatisfies, priceRefusal, unofferedModels } from '../../api/resources.js';
import { CHANNELS } from '../../store/channels.js';
import { recordEvent } from '../../store/events.js';
import { listHostInstanceViews } from '../../store/ssh-hosts.js';
import { sshHosts, type SshConfig } from '../../api/ssh-fleet.js';
import { fleetView, getLiveFleet, listFleets, requestFleetDeletion, type FleetRecord } from '../../store/fleets.js';
import { listInstanceViews } from '../../store/instances.js';
import type { ProjectRecord } from '../../store/projects.js';
import { writeFleet } from '../apply.js';
import { projectFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { notFound, readJsonObject } from '../http-errors.js';
import { checkedFleetSpec, fleetDesired } from '../specs.js';

/** Offers a plan shows; it says how many more there are. */
const PLANNED_OFFERS = 10;

export function fleetRoutes(server: ServerContext): Router {
  const { db, pool } = server;
  const router = new Router({ prefix: '/api/projects/:project/fleets' });
  const view = async (project: ProjectRecord, fleet: FleetRecord) => fleetView(fleet, project.name, fleet.spec.ssh_config
    ? await listHostInstanceViews(db, fleet.id, sshHosts(fleet.spec.ssh_config as SshConfig).map((host) => host.name))
    : await listInstanceViews(db, project.id, { fleetId: fleet.id, includeTerminated: false }));

  const fleetFor = async (project: ProjectRecord, name: string) => {
    const fleet = isDnsLabel(name) ? await getLiveFleet(db, project.id, name) : null;
    if (!fleet) throw notFound(`fleet ${name} not found in project ${project.name}`);
    return fleet;
  };

  router.post('/plan', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const spec = checkedFleetSpec((await readJsonObject(ctx)).spec);
    const desired = fleetDesired(spec, project);
    const existing = await getLiveFleet(db, project.id, desired.name);
    const listing = await pool.offers(project.id, desired.backends, { fresh: true });
    const matching = listing.offers.filter((o) => offerSatisfies(o, desired.requirement));
    const offers = matching.slice(0, PLANNED_OFFERS);
    const plan: FleetPlan = {
      action: !existing ? 'create' : isDeepStrictEqual(existing.spec, desired.spec) ? 'unchanged' : 'update',
      name: desired.name,
      requirement: describeRequirementInWords(desired.requirement),
      currentGeneration: existing?.generation ?? null,
      offers,
      offersTotal: matching.length,
      offerErrors: listing.errors,
      problem: offers.length > 0 || listing.errors.length > 0 || spec.ssh_config ? null
        : priceRefusal(desired.requirement, listing.offers)
          ?? [`no offer matches ${describeRequirement(desired.requirement)}`, unofferedModels(desired.requirement, listing.offers)].filter(Boolean).join(': '),
    };
    ctx.body = plan;
  });

  router.post('/apply', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const desired = fleetDesired(checkedFleetSpec((await readJsonObject(ctx)).spec), project);
    const { fleet, action } = await writeFleet(db, project, desired);
    if (action !== 'unchanged') {
      await db.notify(CHANNELS.fleets);
      await db.notify(CHANNELS.runs);
    }
    ctx.status = action === 'create' ? 201 : 200;
    ctx.body = await view(project, fleet);
  });

  router.get('/', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const fleets = await listFleets(db, project.id, ctx.query.all === 'true');
    ctx.body = await Promise.all(fleets.map((f) => view(project, f)));
  });

  router.get('/:name', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const fleet = await fleetFor(project, ctx.params.name);
    ctx.body = await view(project, fleet);
  });

  router.delete('/:name', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const fleet = await fleetFor(project, ctx.params.name);
    await requestFleetDeletion(db, fleet.id);
    await recordEvent(db, { projectId: project.id, objectKind: 'fleet', objectId: fleet.id, objectName: fleet.name, reason: 'Deleting', message: 'deletion requested' });
    await db.notify(CHANNELS.fleets);
    ctx.status = 202;
    ctx.body = await view(project, (await getLiveFleet(db, project.id, fleet.name)) ?? fleet);
  });
  return router;
}
