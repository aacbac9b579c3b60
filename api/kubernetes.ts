import { Type, type Static } from '@sinclair/typebox';

/** Holds a custom resource until the orchestrator has stopped its run or deleted its fleet. */
export const FINALIZER = 'orchestrator.dev/finalizer';
/** On a namespace (label or annotation): the project its custom resources are applied to. */
export const PROJECT_LABEL = 'orchestrator.dev/project';

export const ConditionType = Type.Union([Type.Literal('Ready'), Type.Literal('Reconciling'), Type.Literal('Stalled')]);
export type ConditionType = Static<typeof ConditionType>;

/** A condition as kstatus (and so Flux and Argo CD) reads it: Reconciling while on the way, Stalled when stuck. */
export const Condition = Type.Object({
  type: ConditionType,
  status: Type.Union([Type.Literal('True'), Type.Literal('False'), Type.Literal('Unknown')]),
  reason: Type.String({ pattern: '^[A-Z][A-Za-z0-9]*$', description: 'One CamelCase word, such as Running or InvalidSpec' }),
  message: Type.String(),
  lastTransitionTime: Type.String({ description: 'When status last changed' }),
  observedGeneration: Type.Integer({ minimum: 0 }),
});
export type Condition = Static<typeof Condition>;

/** What the orchestrator writes into a custom resource's status subresource. */
export const ResourceStatus = Type.Object({
  observedGeneration: Type.Integer({ minimum: 0, description: 'The generation of the spec these fields describe' }),
  conditions: Type.Array(Condition),
  project: Type.Optional(Type.String({ description: 'The orchestrator project the object is applied to' })),
  status: Type.Optional(Type.String({ description: "The run's or fleet's status: submitted, provisioning, running, done, failed, active..." })),
  statusMessage: Type.Optional(Type.String()),
  exitCode: Type.Optional(Type.Integer({ description: "A finished task's exit code" })),
  instance: Type.Optional(Type.String({ description: 'The instance the run is on' })),
  gpu: Type.Optional(Type.String({ description: "The run's GPUs, such as H100:80GB:1" })),
  serviceUrl: Type.Optional(Type.String({ description: "A service's URL: under the server's server_url, or its path when the server has none" })),
  instances: Type.Optional(Type.Integer({ minimum: 0, description: "A fleet's instances that are not terminated" })),
  submittedAt: Type.Optional(Type.String({ description: 'When the run this object started was first submitted; tells it from a run of the same name applied otherwise' })),
});
export type ResourceStatus = Static<typeof ResourceStatus>;
