import { createHash, timingSafeEqual } from 'node:crypto';
import type { Middleware } from 'koa';
import { HttpError } from './http-errors.js';

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** Demands `Authorization: Bearer <token>`; hashes make the comparison constant-time whatever the length. */
export function bearerAuth(token: string): Middleware {
  const expected = digest(token);
  return async (ctx, next) => {
    const header = ctx.get('authorization');
    const match = /^Bearer (.+)$/i.exec(header);
    if (!match || !timingSafeEqual(digest(match[1]!), expected)) {
      ctx.set('WWW-Authenticate', 'Bearer');
      throw new HttpError(401, 'unauthorized', 'a valid bearer token is required');
    }
    await next();
  };
}
