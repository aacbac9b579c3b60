import { Type, type Static } from '@sinclair/typebox';
import { Run } from './objects.js';

/** The messages of a project's live runs stream (`GET /api/projects/:project/live`, server-sent events). */

/** `event: snapshot`, sent first (and again after a reconnect): the newest `limit` runs, newest first. */
export const LiveRunsSnapshot = Type.Object({
  limit: Type.Integer({ description: 'the most runs the stream holds; older ones are left out' }),
  runs: Type.Array(Run),
});
export type LiveRunsSnapshot = Static<typeof LiveRunsSnapshot>;

/** `event: changes`: runs whose views changed or that joined the list, whole, and the ids of runs that left it. */
export const LiveRunsChanges = Type.Object({
  upserts: Type.Array(Run),
  removals: Type.Array(Type.String()),
});
export type LiveRunsChanges = Static<typeof LiveRunsChanges>;
