import { Type, type Static } from '@sinclair/typebox';
import { normalizeResources } from './resources.js';
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
  /** When only some specs leave the field without effect: those for which this holds. */
  when?: (spec: AnySpec) => boolean;
}

const RUNS: readonly SpecType[] = ['task', 'service', 'dev-environment'];

/**
 * Fields the schemas accept that have no effect on some specs, and why. The plans of `apply` show
 * them, so that nobody believes a setting is in force.
 */
const NOT_ACTED_ON: readonly Entry[] = [
  { kinds: ['service'], field: 'retry', message: 'not used by services: a service replaces a failed replica itself' },
  {
    kinds: RUNS, field: 'utilization_policy', message: 'not acted on: it watches the run\'s GPUs, and this run asks for none (resources.gpu: 0)',
    when: (spec) => normalizeResources((spec as { resources?: Parameters<typeof normalizeResources>[0] }).resources, 'run').gpu.count.max === 0,
  },
  { kinds: ['fleet'], field: 'resources.shm_size', message: 'not used on a fleet: each run sets the shared memory of its own container with resources.shm_size' },
  {
    kinds: ['fleet'], field: 'placement', honoured: ['any'],
    message: 'nothing more to do on an SSH fleet: its hosts reach each other at their internal addresses (internal_ip, network or hostname) already',
    when: (spec) => (spec as { ssh_config?: unknown }).ssh_config !== undefined,
  },
  {
    kinds: ['task'], field: 'startup_order', honoured: ['any'],
    message: 'not acted on: it orders the jobs of a multi-node task, and this task runs one job (nodes: 1)',
    when: (spec) => ((spec as { nodes?: number }).nodes ?? 1) <= 1,
  },
];

/** What the process runtime, which has no containers, leaves unused. */
const UNUSED_BY_PROCESS_RUNTIME: readonly Entry[] = [
  { kinds: RUNS, field: 'image', message: 'not used: this instance runs jobs as processes on the machine itself, without a container (a backend with runtime: docker runs images)' },
  { kinds: RUNS, field: 'registry_auth', message: 'not used: this instance pulls no image, as it runs jobs as processes on the machine itself' },
  { kinds: RUNS, field: 'python', message: 'not used: this instance runs jobs as processes on the machine itself, without the default image and its virtual environment of that Python; the commands get the machine\'s own Python' },
  { kinds: RUNS, field: 'nvcc', message: 'not used: this instance runs jobs as processes on the machine itself, without the image that has the CUDA compiler; the commands get the machine\'s own nvcc, if it has one' },
  { kinds: RUNS, field: 'docker', message: 'not used: this instance runs jobs as processes on the machine itself, without a container, so no Docker daemon is started for the run (a backend with runtime: docker starts one)' },
  { kinds: RUNS, field: 'privileged', message: 'not used: this instance runs jobs as processes on the machine itself, with the agent\'s own privileges; only a container can be made privileged' },
  { kinds: RUNS, field: 'resources.shm_size', message: 'not used: this instance runs jobs as processes on the machine itself, which share its /dev/shm' },
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
    .filter((entry) => entry.kinds.includes(spec.type) && asksForMore(spec, entry) && (entry.when?.(spec) ?? true))
    .map(({ field, message }) => ({ field, message }));
}
