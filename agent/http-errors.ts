import type { Middleware } from 'koa';
import type { Logger } from 'winston';

/** An error the API answers with its own status and `{"error": {code, message, details}}`. */
export class HttpError extends Error {
  constructor(readonly status: number, readonly code: string, message: string, readonly details?: unknown) {
    super(message);
    this.name = 'HttpError';
  }
}

export interface ErrorBody {
  error: { code: string; message: string; details?: unknown };
}

/** Turns thrown errors into the API's error shape; unexpected ones become 500 and are logged. */
export function errorResponses(logger: Logger): Middleware {
  return async (ctx, next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) throw new HttpError(404, 'not_found', `no route ${ctx.method} ${ctx.path}`);
      if (ctx.status === 405 && ctx.body === undefined) throw new HttpError(405, 'method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}`);
    } catch (error) {
      const known = error instanceof HttpError
        ? error
        : new HttpError(500, 'internal', 'internal error');
      if (!(error instanceof HttpError)) logger.error('request failed', { method: ctx.method, path: ctx.path, error: (error as Error).stack ?? String(error) });
      ctx.status = known.status;
      const body: ErrorBody = { error: { code: known.code, message: known.message } };
      if (known.details !== undefined) body.error.details = known.details;
      ctx.body = body;
    }
  };
}
