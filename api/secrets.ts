import { Type, type Static } from '@sinclair/typebox';
import { SECRET_NAME_PATTERN } from './interpolation.js';

/** The longest secret value: it travels in a job's env, where a few kilobytes is already a lot. */
export const MAX_SECRET_BYTES = 64 * 1024;

export const SecretName = Type.String({ pattern: SECRET_NAME_PATTERN, description: 'The name runs use in ${{ secrets.NAME }}' });

/** A secret as lists show it: never its value. */
export const SecretInfo = Type.Object({
  name: SecretName,
  createdAt: Type.String({ description: 'ISO 8601' }),
  updatedAt: Type.String({ description: 'ISO 8601: when the value was last set' }),
});
export type SecretInfo = Static<typeof SecretInfo>;

/** `GET /api/projects/:project/secrets/:name`, for a project admin. */
export const SecretWithValue = Type.Composite([SecretInfo, Type.Object({ value: Type.String() })]);
export type SecretWithValue = Static<typeof SecretWithValue>;

/** `PUT /api/projects/:project/secrets/:name`. */
export const SecretRequest = Type.Object({
  value: Type.String({ minLength: 1, description: `UTF-8 text of at most ${MAX_SECRET_BYTES} bytes` }),
}, { additionalProperties: false });
export type SecretRequest = Static<typeof SecretRequest>;
