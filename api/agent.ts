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

/**
 * A repo of a run, as the agent puts it in place before the job starts: cloned from `url` (at `hash`, else
 * `branch`, else the remote's default branch) with the uncommitted changes of the applier's checkout applied
 * on top, or, for a repo no remote of which was reachable, its working tree uploaded as `files`.
 */
export const JobRepo = Type.Object({
  path: Type.String({ minLength: 1, pattern: '^/', 'x-expected': 'an absolute path', description: 'Where the repo lands inside the container' }),
  url: Type.Optional(Type.String({ minLength: 1 })),
  branch: Type.Optional(Type.String({ minLength: 1 })),
  hash: Type.Optional(Type.String({ pattern: '^[0-9a-f]{4,64}$', 'x-expected': 'a commit hash' })),
  /** `git diff --binary` of the applier's changes since `hash`, applied with `git apply`. */
  diffBase64: Type.Optional(Type.String({ format: 'base64', 'x-expected': 'base64 (A-Z, a-z, 0-9, + and /, padded with =)' })),
  /** The working tree, relative to `path`, when there is no `url` to clone. */
  files: Type.Optional(Type.Array(JobFile)),
  /** Where files are at `path` already (the image's): fail the job, or leave them and skip the repo; left out, the repo goes over them. */
  ifExists: Type.Optional(Type.Union([Type.Literal('error'), Type.Literal('skip')])),
}, { additionalProperties: false });
export type JobRepo = Static<typeof JobRepo>;

/** A directory of the instance given to the job: bind-mounted into its container, or linked into a process job's folder. */
export const JobVolume = Type.Object({
  instancePath: Type.String({ minLength: 1, pattern: '^/' }),
  path: Type.String({ minLength: 1, pattern: '^/' }),
  /** Start the job without it when the instance lacks `instancePath`. */
  optional: Type.Boolean(),
}, { additionalProperties: false });
export type JobVolume = Static<typeof JobVolume>;

/** Where a job stands among its run's nodes: its rank, and every node's instance address in rank order (node 0 first). */
export const JobNodes = Type.Object({
  rank: Type.Integer({ minimum: 0 }),
  ips: Type.Array(Type.String({ minLength: 1 }), { minItems: 1 }),
}, { additionalProperties: false });
export type JobNodes = Static<typeof JobNodes>;

/** What the control plane sends an instance's agent: one job of a run. Submitting the same jobId twice is a no-op. */
export const JobSubmission = Type.Object({
  jobId: Type.String({ minLength: 1 }),
  runName: Type.String({ minLength: 1 }),
  image: Type.Optional(Type.String()),
  commands: Type.Array(Type.String()),
  /** The shell the commands run in (`<shell> -c`), an absolute path; /bin/sh when absent. */
  shell: Type.Optional(Type.String({ pattern: '^/' })),
  /** When given, the job runs these words followed by the commands, each one argument, instead of the shell; it replaces the image's entrypoint. */
  entrypoint: Type.Optional(Type.Array(Type.String(), { minItems: 1 })),
  /**
   * The commands run in a virtual environment of this Python (a version such as "3.12"), made with uv at
   * /orchestrator/venv before them and activated for them, as dstack runs commands in its own image. Only a
   * container is given one (its image, the default image, has uv and these Pythons).
   */
  venvPython: Type.Optional(Type.String({ minLength: 1 })),
  /** Run the container in privileged mode (only a container can be). */
  privileged: Type.Optional(Type.Boolean()),
  /** The size of the container's /dev/shm in MiB; the engine's default when absent. */
  shmSizeMib: Type.Optional(Type.Number({ exclusiveMinimum: 0 })),
  env: Type.Record(Type.String(), Type.String()),
  files: Type.Array(JobFile),
  workingDir: Type.Optional(Type.String()),
  ports: Type.Array(Type.Integer({ minimum: 1, maximum: 65535 })),
  /** The port the job's service answers on: the job finds where to listen in `PORT`, and the port is forwarded. */
  servicePort: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
  gpus: Type.Integer({ minimum: 0 }),
  /** The GPUs (by index on the instance) of the job's blocks, when it shares the instance with others; all of them when absent. */
  gpuIndices: Type.Optional(Type.Array(Type.Integer({ minimum: 0 }))),
  /** The job's place among the nodes of its run, one job per instance; for a single job, node 0 of 1. */
  nodes: Type.Optional(JobNodes),
  /** Credentials for pulling `image` from its registry. */
  registryAuth: Type.Optional(Type.Object({ username: Type.String(), password: Type.String() }, { additionalProperties: false })),
  repos: Type.Optional(Type.Array(JobRepo)),
  volumes: Type.Optional(Type.Array(JobVolume)),
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
  /** Forwarded HTTP exchanges not yet finished and WebSocket tunnels open; absent from older agents. */
  forwarding: Type.Optional(Type.Integer({ minimum: 0 })),
  /** SSH connections open into the job; absent from older agents. */
  sshConnections: Type.Optional(Type.Integer({ minimum: 0 })),
  /** When an SSH connection into the job last carried data, opened or closed (ISO 8601); absent before the first. */
  lastSshActivityAt: Type.Optional(Type.String()),
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
/**
 * A port forward may carry the agent's token (`Bearer <token>`) in this header instead of `Authorization`,
 * which then reaches the job untouched.
 */
export const AGENT_FORWARD_AUTH_HEADER = 'x-agent-authorization';

/** The environment variable `orchestrator agent` takes its token from (and removes from its own environment). */
export const AGENT_TOKEN_VARIABLE = 'ORCHESTRATOR_AGENT_TOKEN';

/** `GET /api/jobs/:id/ssh`: base64 of the OpenSSH authorized_keys text whose keys alone may log in. */
export const SSH_AUTHORIZED_KEYS_HEADER = 'x-ssh-authorized-keys';

/** How long (ms) a forward waits for the job's first byte, set by the caller per request (a service's first_byte_timeout). */
export const AGENT_FIRST_BYTE_TIMEOUT_HEADER = 'x-agent-first-byte-timeout-ms';
/** The longest first-byte wait a caller may ask for. */
export const MAX_FIRST_BYTE_TIMEOUT_MS = 3_600_000;

/**
 * A port forward asked with `Upgrade: <this>` becomes a byte tunnel to the job's port once the agent has checked the
 * token, the job and the port: the caller then speaks HTTP to the job itself over it, request after request, and the
 * agent relays bytes without parsing them. The caller's upstream pool keeps such tunnels open.
 */
export const AGENT_TUNNEL_PROTOCOL = 'orchestrator-tunnel';

/** Body of `POST /api/jobs/watch`: the jobs to report on, each with the last log entry the caller holds. */
export const JobsWatchRequest = Type.Object({
  jobs: Type.Array(Type.Object({
    jobId: Type.String(),
    after: Type.Integer({ minimum: 0 }),
  }, { additionalProperties: false }), { maxItems: 10_000 }),
}, { additionalProperties: false });
export type JobsWatchRequest = Static<typeof JobsWatchRequest>;

/**
 * One job in the answer of `POST /api/jobs/watch`: its status (null when the agent has no such job) and its entries
 * after the caller's `after`, as stored (JSON lines, `first` to `next`, as `format=jsonl` gives them); `more` says that
 * entries after `next` exist already, which the caller asks for next.
 */
export const WatchedJob = Type.Object({
  jobId: Type.String(),
  status: Type.Union([JobStatus, Type.Null()]),
  log: Type.Object({
    jsonLines: Type.String(),
    first: Type.Integer({ minimum: 0 }),
    next: Type.Integer({ minimum: 0 }),
    finished: Type.Boolean(),
    more: Type.Boolean(),
  }),
});
export type WatchedJob = Static<typeof WatchedJob>;

export const JobsWatch = Type.Object({ jobs: Type.Array(WatchedJob) });
export type JobsWatch = Static<typeof JobsWatch>;

/** The longest an agent holds `POST /api/jobs/changes` before answering that nothing changed. */
export const MAX_CHANGES_WAIT_MS = 30_000;

/** Body of `POST /api/jobs/changes`: jobs with the state the caller last saw each in, and how long to wait for one to leave it. */
export const JobsChangesRequest = Type.Object({
  jobs: Type.Array(Type.Object({
    jobId: Type.String(),
    state: JobState,
  }, { additionalProperties: false }), { maxItems: 10_000 }),
  waitMs: Type.Integer({ minimum: 0, maximum: MAX_CHANGES_WAIT_MS }),
}, { additionalProperties: false });
export type JobsChangesRequest = Static<typeof JobsChangesRequest>;

/** The answer of `POST /api/jobs/changes`: the asked jobs whose state is not the one given (null: the agent has no such job). */
export const JobsChanges = Type.Object({
  changed: Type.Array(Type.Object({ jobId: Type.String(), state: Type.Union([JobState, Type.Null()]) })),
});
export type JobsChanges = Static<typeof JobsChanges>;

export const LOG_LINES_HEADERS = { first: 'x-log-first', next: 'x-log-next', finished: 'x-log-finished' } as const;

export const AgentHealth = Type.Object({
  ok: Type.Boolean(),
  version: Type.String(),
  instanceId: Type.String(),
  runtime: Type.Union([Type.Literal('docker'), Type.Literal('process')]),
  gpu: GpuInfo,
  jobs: Type.Array(Type.String()),
  /** The agent's SSH host key, OpenSSH one-line form ("ssh-ed25519 AAAA..."); absent from older agents. */
  sshHostKey: Type.Optional(Type.String()),
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

/**
 * The file in an agent's work folder that holds the utilisation, in percent, its declared GPUs report where
 * nvidia-smi is absent: the gpucloud emulator writes it so that tests can drive utilization_policy.
 */
export const DECLARED_GPU_UTILIZATION_FILE = 'declared-gpu-utilization';
