import type { Context, Next } from 'koa';
import type { Logger } from 'winston';
import type { ApiError } from '../api/objects.js';

/** An error meant for the client: its status and code reach the response as they are. */
export class HttpError extends Error {
  constructor(readonly status: number, readonly code: string, message: string, readonly details?: unknown) {
    super(message);
  }
}

export const badRequest = (message: string, details?: unknown) => new HttpError(400, 'bad_request', message, details);
export const notFound = (message: string) => new HttpError(404, 'not_found', message);
export const conflict = (message: string) => new HttpError(409, 'conflict', message);
export const invalidSpec = (message: string, details?: unknown) => new HttpError(422, 'invalid_spec', message, details);

/** Every failure leaves as `{"error": {code, message, details}}`; only our own faults are 5xx, and they are logged. */
export function errorMiddleware(logger: Logger) {
  return async (ctx: Context, next: Next) => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) throw notFound(`no route for ${ctx.method} ${ctx.path}`);
      if (ctx.status === 405) throw new HttpError(405, 'method_not_allowed', `${ctx.method} is not allowed on ${ctx.path}`);
    } catch (error) {
      const known = error instanceof HttpError ? error : null;
      if (!known) logger.error(`${ctx.method} ${ctx.path}: ${(error as Error).stack ?? error}`);
      const body: ApiError = { error: { code: known?.code ?? 'internal', message: known?.message ?? 'internal server error' } };
      if (known?.details !== undefined) body.error.details = known.details;
      ctx.status = known?.status ?? 500;
      ctx.body = body;
    }
  };
}

const MAX_BODY_BYTES = 8 * 1024 * 1024;
/** Far deeper than any spec; bounds every recursive walk over a body (validation, the database's JSON). */
const MAX_JSON_DEPTH = 64;

/** Whether JSON text nests arrays and objects deeper than `limit`; brackets inside strings do not count. */
function nestsDeeper(text: string, limit: number): boolean {
  let depth = 0;
  let inString = false;
  for (let index = 0; index < text.length; index++) {
    const char = text[index];
    if (inString) {
      if (char === '\\') index++;
      else if (char === '"') inString = false;
    } else if (char === '"') {
      inString = true;
    } else if (char === '{' || char === '[') {
      if (++depth > limit) return true;
    } else if (char === '}' || char === ']') {
      depth--;
    }
  }
  return false;
}

/** Reads a JSON object body: 413 past the limit, 400 for anything that is not a JSON object or nests too deep. */
export async function readJsonObject(ctx: Context): Promise<Record<string, unknown>> {
  const declared = Number(ctx.get('content-length') || 0);
  if (declared > MAX_BODY_BYTES) throw new HttpError(413, 'payload_too_large', `the body is larger than ${MAX_BODY_BYTES} bytes`);
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'payload_too_large', `the body is larger than ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  if (nestsDeeper(text, MAX_JSON_DEPTH)) throw badRequest(`the body nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw badRequest(`the body is not valid JSON: ${(error as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw badRequest('the body must be a JSON object');
  return value as Record<string, unknown>;
}
