import { Type, type Static } from '@sinclair/typebox';
import { GpuInfo } from './offer.js';

/** What the control plane sends an instance's agent: one job of a run. Submitting the same jobId twice is a no-op. */
export const JobSubmission = Type.Object({
  jobId: Type.String({ minLength: 1 }),
  runName: Type.String({ minLength: 1 }),
  image: Type.Optional(Type.String()),
  commands: Type.Array(Type.String()),
  env: Type.Record(Type.String(), Type.String()),
  files: Type.Array(Type.Object({
    path: Type.String(),
    contentBase64: Type.String(),
    mode: Type.Optional(Type.Integer()),
  })),
  workingDir: Type.Optional(Type.String()),
  ports: Type.Array(Type.Integer({ minimum: 1, maximum: 65535 })),
  gpus: Type.Integer({ minimum: 0 }),
});
export type JobSubmission = Static<typeof JobSubmission>;

export const JobState = Type.Union([
  Type.Literal('pending'), Type.Literal('pulling'), Type.Literal('running'),
  Type.Literal('exited'), Type.Literal('failed'), Type.Literal('stopped'),
]);
export type JobState = Static<typeof JobState>;

export const JobStatus = Type.Object({
  jobId: Type.String(),
  state: JobState,
  exitCode: Type.Union([Type.Integer(), Type.Null()]),
  reason: Type.Optional(Type.String()),
  startedAt: Type.Union([Type.String(), Type.Null()]),
  finishedAt: Type.Union([Type.String(), Type.Null()]),
});
export type JobStatus = Static<typeof JobStatus>;

export const LogStream = Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]);
export const LogEntry = Type.Object({
  seq: Type.Integer({ minimum: 1 }),
  ts: Type.String(),
  stream: LogStream,
  text: Type.String(),
});
export type LogEntry = Static<typeof LogEntry>;

export const LogsPage = Type.Object({
  entries: Type.Array(LogEntry),
  next: Type.Integer({ minimum: 0 }),
  finished: Type.Boolean(),
});
export type LogsPage = Static<typeof LogsPage>;

export const AgentHealth = Type.Object({
  ok: Type.Boolean(),
  version: Type.String(),
  instanceId: Type.String(),
  runtime: Type.Union([Type.Literal('docker'), Type.Literal('process')]),
  gpu: GpuInfo,
  jobs: Type.Array(Type.String()),
});
export type AgentHealth = Static<typeof AgentHealth>;

export const AgentMetrics = Type.Object({
  ts: Type.String(),
  cpuPercent: Type.Number(),
  memoryUsedMib: Type.Number(),
  memoryTotalMib: Type.Number(),
  gpus: Type.Array(Type.Object({
    index: Type.Integer(),
    name: Type.String(),
    utilizationPercent: Type.Number(),
    memoryUsedMib: Type.Number(),
    memoryTotalMib: Type.Number(),
  })),
});
export type AgentMetrics = Static<typeof AgentMetrics>;
