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

/**
 * `event: lists`, sent first and whenever one changes: a version of each of the project's other lists that changes
 * when the list may (its values mean nothing else); a page showing one reads it again when its version changes.
 */
export const LiveListVersions = Type.Object({
  events: Type.String(),
  fleets: Type.String({ description: 'fleets, their instances and what those cost' }),
  gateways: Type.String(),
});
export type LiveListVersions = Static<typeof LiveListVersions>;
