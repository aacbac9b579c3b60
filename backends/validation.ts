import type { TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';

/** The first reason a value does not match a schema, as "path: message", or null when it matches. */
export function firstMismatch(schema: TSchema, value: unknown): string | null {
  const first = Value.Errors(schema, value).First();
  if (!first) return null;
  return `${first.path || '(body)'}: ${first.message}`;
}
