import Router from '@koa/router';
import { SECRET_NAME_RULE } from '../../api/interpolation.js';
import { MAX_SECRET_BYTES, SecretName, type SecretWithValue } from '../../api/secrets.js';
import { deleteSecret, getSecret, listSecrets, SecretUndecryptableError, setSecret } from '../../store/secrets.js';
import { projectAdminFor, projectFor } from '../auth.js';
import type { ServerContext } from '../context.js';
import { badRequest, HttpError, notFound, readJsonObject } from '../http-errors.js';

const NAME = new RegExp(SecretName.pattern!);

function checkedName(name: string): string {
  if (!NAME.test(name)) throw badRequest(`secret name "${name}" is not valid: use ${SECRET_NAME_RULE}`);
  return name;
}

function checkedValue(body: Record<string, unknown>): string {
  const extra = Object.keys(body).filter((key) => key !== 'value');
  if (extra.length > 0) throw badRequest(`unknown field ${extra[0]}; expected {"value": "..."}`);
  if (typeof body.value !== 'string') throw badRequest('value: expected a string, as {"value": "..."}');
  if (body.value === '') throw badRequest('value: expected a non-empty string');
  if (Buffer.byteLength(body.value) > MAX_SECRET_BYTES) throw new HttpError(413, 'payload_too_large', `value: a secret is at most ${MAX_SECRET_BYTES} bytes`);
  return body.value;
}

/**
 * A project's secrets, which runs name as `${{ secrets.NAME }}`. Any member may list their names; reading, setting
 * and deleting a value is for the project's admins (and global admins), as managing its members is.
 */
export function secretRoutes(server: ServerContext): Router {
  const { db, secrets } = server;
  const router = new Router({ prefix: '/api/projects/:project/secrets' });

  router.get('/', async (ctx) => {
    const project = await projectFor(db, ctx, ctx.params.project);
    ctx.body = await listSecrets(db, project.id);
  });

  router.get('/:name', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    const name = checkedName(ctx.params.name);
    let secret: SecretWithValue | null;
    try {
      secret = await getSecret(db, secrets, project.id, name);
    } catch (error) {
      if (error instanceof SecretUndecryptableError) throw new HttpError(409, 'secret_undecryptable', error.message);
      throw error;
    }
    if (!secret) throw notFound(`secret ${name} not found in project ${project.name}`);
    ctx.set('cache-control', 'no-store');
    ctx.body = secret;
  });

  router.put('/:name', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    const name = checkedName(ctx.params.name);
    const { secret, created } = await setSecret(db, secrets, project.id, name, checkedValue(await readJsonObject(ctx)));
    ctx.status = created ? 201 : 200;
    ctx.body = secret;
  });

  router.delete('/:name', async (ctx) => {
    const project = await projectAdminFor(db, ctx, ctx.params.project);
    const name = checkedName(ctx.params.name);
    if (!(await deleteSecret(db, project.id, name))) throw notFound(`secret ${name} not found in project ${project.name}`);
    ctx.status = 204;
  });
  return router;
}
