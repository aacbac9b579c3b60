import type { Context } from 'koa';
import { HttpError } from './http-errors.js';

/** Largest request body accepted: job submissions carry their files inline. */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;

/** Reads the request body as JSON; an empty body reads as `{}`. */
export async function readJsonBody(ctx: Context): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new HttpError(413, 'body_too_large', `request body exceeds ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim().length === 0) return {};
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new HttpError(400, 'invalid_json', `request body is not valid JSON: ${(error as Error).message}`);
  }
}
