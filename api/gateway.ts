import { Type, type Static } from '@sinclair/typebox';

/** A model on `/proxy/models/<project>/models`, in OpenAI's shape. */
export const ModelEntry = Type.Object({
  id: Type.String({ description: 'The model name that requests give in `model`' }),
  object: Type.Literal('model'),
  /** When the service that serves it was submitted, in Unix seconds. */
  created: Type.Integer(),
  owned_by: Type.String({ description: 'The project' }),
});
export type ModelEntry = Static<typeof ModelEntry>;

export const ModelList = Type.Object({
  object: Type.Literal('list'),
  data: Type.Array(ModelEntry),
});
export type ModelList = Static<typeof ModelList>;
