import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Middleware } from 'koa';
import { HttpError } from './http-errors.js';

function digest(value: string): Buffer {
  return createHash('sha256').update(value).digest();
}

/** Whether a header's value is `Bearer <token>`; hashes make the comparison constant-time whatever the length. */
export function bearerCheck(token: string): (credential: string | undefined) => boolean {
  const expected = digest(token);
  return (credential) => {
    const match = /^Bearer (.+)$/i.exec(credential ?? '');
    return match !== null && timingSafeEqual(digest(match[1]!), expected);
  };
}

/** Demands `Bearer <token>` in the header `credential` reads (Authorization, or a port forward's own). */
export function bearerAuth(
  authorized: (credential: string | undefined) => boolean,
  credential: (req: IncomingMessage) => string | undefined,
): Middleware {
  return async (ctx, next) => {
    if (!authorized(credential(ctx.req))) {
      ctx.set('WWW-Authenticate', 'Bearer');
      throw new HttpError(401, 'unauthorized', 'a valid bearer token is required');
    }
    await next();
  };
}
