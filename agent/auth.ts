import { createHash, timingSafeEqual } from 'node:crypto';
import type { Middleware } from 'koa';
import { HttpError } from './http-errors.js';

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** Whether an Authorization header is `Bearer <token>`; hashes make the comparison constant-time whatever the length. */
export function bearerCheck(token: string): (authorization: string | undefined) => boolean {
  const expected = digest(token);
  return (authorization) => {
    const match = /^Bearer (.+)$/i.exec(authorization ?? '');
    return match !== null && timingSafeEqual(digest(match[1]!), expected);
  };
}

/** Demands `Authorization: Bearer <token>`. */
export function bearerAuth(authorized: (authorization: string | undefined) => boolean): Middleware {
  return async (ctx, next) => {
    if (!authorized(ctx.get('authorization'))) {
      ctx.set('WWW-Authenticate', 'Bearer');
      throw new HttpError(401, 'unauthorized', 'a valid bearer token is required');
    }
    await next();
  };
}
