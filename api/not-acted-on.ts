import { Type, type Static } from '@sinclair/typebox';
import type { AnySpec, SpecType } from './spec.js';

/** How an instance's agent runs jobs: in containers, or as plain processes on the machine itself. */
export const JobRuntime = Type.Union([Type.Literal('docker'), Type.Literal('process')]);
export type JobRuntime = Static<typeof JobRuntime>;

/** A field of a spec that is accepted but will not do what it says, and what happens instead. */
export const FieldNotActedOn = Type.Object({
  field: Type.String({ description: 'The field as written in the spec, e.g. retry or resources.shm_size' }),
  message: Type.String(),
});
export type FieldNotActedOn = Static<typeof FieldNotActedOn>;

interface Entry {
  kinds: readonly SpecType[];
  field: string;
  message: string;
  /** Values that ask for what happens anyway; a field set to one of them is not listed. */
  honoured?: readonly unknown[];
}

const RUNS: readonly SpecType[] = ['task', 'service', 'dev-environment'];
const NOT_YET = 'not acted on yet;';

/**
 * Fields the schemas accept that nothing acts on yet. When a field gets its behaviour, its line goes;
 * the plans of `apply` show what is left here, so that nobody believes a setting is in force.
 */
const NOT_ACTED_ON: readonly Entry[] = [
  { kinds: ['task'], field: 'retry', message: `${NOT_YET} the run will not be resubmitted` },
  { kinds: ['task'], field: 'utilization_policy', message: `${NOT_YET} the run is not stopped when its GPUs stay idle` },
  { kinds: ['task'], field: 'registry_auth', message: `${NOT_YET} images are pulled without credentials, so a private image fails to pull` },
  { kinds: ['task', 'service'], field: 'repos', message: `${NOT_YET} nothing is cloned or copied; use files for local code` },
  { kinds: ['task', 'service', 'dev-environment'], field: 'python', message: `${NOT_YET} the commands get whatever Python the image (or, without a container, the machine) has` },
  { kinds: ['task', 'dev-environment'], field: 'ports', message: `${NOT_YET} nothing forwards them to your machine; a container publishes them on its instance only` },
  { kinds: ['service'], field: 'port', message: `${NOT_YET} the service is not reachable through the server (there is no proxy yet)` },
  { kinds: ['service'], field: 'model', message: `${NOT_YET} no model endpoint serves it` },
  { kinds: ['service'], field: 'replicas', message: `${NOT_YET} one replica runs`, honoured: [1, '1', '1..1'] },
  { kinds: ['service'], field: 'scaling', message: `${NOT_YET} the number of replicas does not follow load` },
  { kinds: ['service'], field: 'auth', message: `${NOT_YET} the service is not published, with or without a token` },
  { kinds: ['service'], field: 'probes', message: `${NOT_YET} nothing checks the service; it counts as running once started` },
  { kinds: ['service'], field: 'volumes', message: `${NOT_YET} nothing is mounted into the container` },
  { kinds: ['dev-environment'], field: 'ide', message: `${NOT_YET} no IDE is set up or opened` },
  { kinds: ['dev-environment'], field: 'inactivity_duration', message: `${NOT_YET} the dev environment is not stopped when unused` },
  { kinds: ['fleet', ...RUNS], field: 'resources.shm_size', message: `${NOT_YET} the container gets the runtime's default shared memory` },
];

/** What the process runtime, which has no containers, leaves unused. */
const UNUSED_BY_PROCESS_RUNTIME: readonly Entry[] = [
  { kinds: RUNS, field: 'image', message: 'not used: this instance runs jobs as processes on the machine itself, without a container (a backend with runtime: docker runs images)' },
];

/** Whether the spec sets the entry's field to something other than what happens anyway (false, off, an empty list). */
function asksForMore(spec: AnySpec, entry: Entry): boolean {
  let value: unknown = spec;
  for (const part of entry.field.split('.')) {
    if (typeof value !== 'object' || value === null) return false;
    value = (value as Record<string, unknown>)[part];
  }
  const nothing = value === undefined || value === false || value === 'off' || (Array.isArray(value) && value.length === 0);
  return !nothing && !(entry.honoured ?? []).includes(value);
}

/**
 * The fields of `spec` that will not do what they say: those nothing acts on yet, and, when the run
 * would land on an instance that runs jobs as processes, those that need a container.
 */
export function fieldsNotActedOn(spec: AnySpec, runtime: JobRuntime | null): FieldNotActedOn[] {
  const entries = runtime === 'process' ? [...NOT_ACTED_ON, ...UNUSED_BY_PROCESS_RUNTIME] : NOT_ACTED_ON;
  return entries
    .filter((entry) => entry.kinds.includes(spec.type) && asksForMore(spec, entry))
    .map(({ field, message }) => ({ field, message }));
}
