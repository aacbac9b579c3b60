import Router from '@koa/router';
import { isDnsLabel } from '../../api/names.js';
import { recordEvent } from '../../store/events.js';
import { gatewayView, getLiveGateway, listCertificates, listGateways, requestGatewayDeletion, type GatewayRecord } from '../../store/gateways.js';
import { CHANNELS } from '../../store/channels.js';
import type { ProjectRecord } from '../../store/projects.js';
import { projectFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { notFound } from '../http-errors.js';

/** A project's gateways as users see them: `gateway list` and `gateway delete`. `apply` writes them. */
export function gatewayRoutes(server: ServerContext): Router {
  const { db } = server;
  const router = new Router({ prefix: '/api/projects/:project/gateways' });
  const view = async (project: ProjectRecord, gateway: GatewayRecord) => gatewayView(gateway, project.name, await listCertificates(db, gateway.id));
  const gatewayFor = async (project: ProjectRecord, name: string) => {
    const gateway = isDnsLabel(name) ? await getLiveGateway(db, project.id, name) : null;
    if (!gateway) throw notFound(`gateway ${name} not found in project ${project.name}`);
    return gateway;
  };

  router.get('/', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    ctx.body = await Promise.all((await listGateways(db, project.id)).map((gateway) => view(project, gateway)));
  });

  router.get('/:name', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    ctx.body = await view(project, await gatewayFor(project, ctx.params.name));
  });

  router.delete('/:name', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    const gateway = await gatewayFor(project, ctx.params.name);
    await requestGatewayDeletion(db, gateway.id);
    await recordEvent(db, { projectId: project.id, objectKind: 'gateway', objectId: gateway.id, objectName: gateway.name, reason: 'Deleting', message: 'deletion requested' });
    await db.notify(CHANNELS.gateways);
    ctx.status = 202;
    ctx.body = await view(project, (await getLiveGateway(db, project.id, gateway.name)) ?? gateway);
  });
  return router;
}
