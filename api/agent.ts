import { FormatRegistry, Type, type Static } from '@sinclair/typebox';
import { GpuInfo } from './offer.js';

/**
 * Standard base64 with its padding (Buffer.from(text, 'base64') would quietly read anything). A format,
 * not a pattern: a regular expression that counts groups of four overflows the stack on megabytes.
 */
FormatRegistry.Set('base64', (text) => text.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(text));

/** One file of a run, as `apply` takes it and the agent writes it. */
export const JobFile = Type.Object({
  path: Type.String({
    minLength: 1, pattern: '^[^\\u0000]*$', 'x-expected': 'a path without NUL characters',
    description: 'Relative to the working directory, or absolute inside a container',
  }),
  contentBase64: Type.String({ format: 'base64', 'x-expected': 'base64 (A-Z, a-z, 0-9, + and /, padded with =)' }),
  mode: Type.Optional(Type.Integer({
    minimum: 0, maximum: 0o7777, 'x-expected': 'a file mode from 0 to 0o7777 (4095)',
    description: 'Only the permission bits (0o777) are kept: never setuid, setgid or sticky',
  })),
}, { additionalProperties: false });
export type JobFile = Static<typeof JobFile>;

/** What the control plane sends an instance's agent: one job of a run. Submitting the same jobId twice is a no-op. */
export const JobSubmission = Type.Object({
  jobId: Type.String({ minLength: 1 }),
  runName: Type.String({ minLength: 1 }),
  image: Type.Optional(Type.String()),
  commands: Type.Array(Type.String()),
  env: Type.Record(Type.String(), Type.String()),
  files: Type.Array(JobFile),
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

/**
 * `GET /api/jobs/:id/logs?format=jsonl`: the same page as JSON lines (one LogEntry per line, the file's
 * own bytes, for copying without parsing), described by these response headers.
 */
export const LOG_LINES_HEADERS = { first: 'x-log-first', next: 'x-log-next', finished: 'x-log-finished' } as const;

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
