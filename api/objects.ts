import { Type, type Static } from '@sinclair/typebox';
import { JobFile, JobRepo } from './agent.js';
import { Gateway } from './gateways.js';
import { FieldNotActedOn, JobRuntime } from './not-acted-on.js';
import { GpuInfo, Offer } from './offer.js';
import { ServiceInfo } from './services.js';
import { FleetStatus, InstanceStatus, RunStatus } from './status.js';

/** The objects the management API answers with; the CLI reads the same shapes. */

const Timestamp = Type.String({ description: 'ISO 8601' });
const NullableTimestamp = Type.Union([Timestamp, Type.Null()]);
const JsonObject = Type.Record(Type.String(), Type.Unknown());

export const ApiError = Type.Object({
  error: Type.Object({
    code: Type.String(),
    message: Type.String(),
    details: Type.Optional(Type.Unknown()),
  }),
});
export type ApiError = Static<typeof ApiError>;

export const Project = Type.Object({
  name: Type.String(),
  backends: Type.Array(Type.String()),
  createdAt: Timestamp,
});
export type Project = Static<typeof Project>;

/** A backend of a project as the server's config.yml sets it up: its settings, and of its credentials only their kind. */
export const ProjectBackend = Type.Object({
  type: Type.String(),
  settings: Type.Record(Type.String(), Type.Union([Type.String(), Type.Number(), Type.Boolean()])),
  credentials: Type.Union([Type.String({ description: 'The kind of credentials configured, such as api_key; never their value' }), Type.Null()]),
});
export type ProjectBackend = Static<typeof ProjectBackend>;

/** A user's role: globally, `admin` may do everything; in a project, `admin` also manages its members. */
export const Role = Type.Union([Type.Literal('admin'), Type.Literal('user')]);
export type Role = Static<typeof Role>;

export const User = Type.Object({
  name: Type.String(),
  admin: Type.Boolean(),
  createdAt: Timestamp,
});
export type User = Static<typeof User>;

/** A new user or a rotated token: the only answer that ever holds the token; the server keeps its hash. */
export const UserWithToken = Type.Composite([User, Type.Object({ token: Type.String() })]);
export type UserWithToken = Static<typeof UserWithToken>;

export const Member = Type.Object({
  user: Type.String(),
  role: Role,
});
export type Member = Static<typeof Member>;

export const Instance = Type.Object({
  id: Type.String(),
  name: Type.String(),
  fleet: Type.String(),
  backend: Type.String(),
  status: InstanceStatus,
  statusMessage: Type.String(),
  terminationReason: Type.Union([Type.String(), Type.Null()]),
  gpu: Type.Union([GpuInfo, Type.Null()]),
  region: Type.Union([Type.String(), Type.Null()]),
  pricePerHour: Type.Union([Type.Number(), Type.Null()]),
  /** Dollars the instance has cost so far, from the ledger. */
  cost: Type.Number(),
  /** The host of an SSH fleet this instance is (`10.0.0.5`, `10.0.0.5:2222`); null for other backends. */
  host: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  run: Type.Union([Type.String(), Type.Null()]),
  idleSince: NullableTimestamp,
  createdAt: Timestamp,
  terminatedAt: NullableTimestamp,
  /** For an instance of a fleet split into blocks: the blocks runs hold and the blocks there are; null otherwise. */
  blocks: Type.Union([Type.Object({ busy: Type.Integer({ minimum: 0 }), total: Type.Integer({ minimum: 1 }) }), Type.Null()]),
});
export type Instance = Static<typeof Instance>;

export const Fleet = Type.Object({
  id: Type.String(),
  project: Type.String(),
  name: Type.String(),
  status: FleetStatus,
  statusMessage: Type.String(),
  generation: Type.Integer(),
  spec: JsonObject,
  instances: Type.Array(Instance),
  createdAt: Timestamp,
});
export type Fleet = Static<typeof Fleet>;

/** A user's public key, which lets them `ssh` into the runs of every project they are a member of. */
export const SshKey = Type.Object({
  /** `SHA256:...`, as `ssh-keygen -l` prints it. */
  fingerprint: Type.String(),
  /** One line of OpenSSH's authorized_keys form: `ssh-ed25519 AAAA... comment`. */
  publicKey: Type.String(),
  createdAt: Timestamp,
});
export type SshKey = Static<typeof SshKey>;

export const SSH_PUBLIC_KEY_MAX_BYTES = 16 * 1024;

/** `PUT /api/users/me/ssh-keys`. */
export const SshKeyRequest = Type.Object({
  publicKey: Type.String({ minLength: 1, maxLength: SSH_PUBLIC_KEY_MAX_BYTES }),
}, { additionalProperties: false });
export type SshKeyRequest = Static<typeof SshKeyRequest>;

/** Where `ssh` reaches a job and the host keys it may show: its agents' keys, in OpenSSH's one-line form. */
export const SshHost = Type.Object({
  /** The name known_hosts holds the key under (OpenSSH's HostKeyAlias), unique per project, run and replica. */
  hostAlias: Type.String(),
  hostKeys: Type.Array(Type.String()),
});
export type SshHost = Static<typeof SshHost>;

/**
 * How to reach a running run over SSH. For a service, the run's own alias reaches its lowest-numbered ready
 * replica, so it accepts the host key of any replica's instance; each replica has an alias of its own too.
 */
export const RunSsh = Type.Composite([SshHost, Type.Object({
  replicas: Type.Array(Type.Composite([SshHost, Type.Object({ replica: Type.Integer() })])),
})]);
export type RunSsh = Static<typeof RunSsh>;

/** One node of a multi-node task: its job, and the instance it runs on. */
export const RunNode = Type.Object({
  rank: Type.Integer({ minimum: 0, description: 'ORCHESTRATOR_NODE_RANK of its job; node 0 is the master' }),
  status: RunStatus,
  statusMessage: Type.String(),
  terminationReason: Type.Union([Type.String(), Type.Null()]),
  exitCode: Type.Union([Type.Integer(), Type.Null()]),
  instance: Type.Union([Type.String(), Type.Null()]),
  gpu: Type.Union([GpuInfo, Type.Null()]),
  pricePerHour: Type.Union([Type.Number(), Type.Null()]),
  startedAt: NullableTimestamp,
  finishedAt: NullableTimestamp,
});
export type RunNode = Static<typeof RunNode>;

/** When a scheduled task submits its runs (`schedule` of a task). */
export const RunSchedule = Type.Object({
  cron: Type.Array(Type.String(), { description: 'The cron expressions, in UTC' }),
  /** When the next run is due; null once the schedule has ended. */
  nextRunAt: NullableTimestamp,
  /** The run it submitted last; null before its first. */
  lastRun: Type.Union([Type.String(), Type.Null()]),
});
export type RunSchedule = Static<typeof RunSchedule>;

export const Run = Type.Object({
  id: Type.String(),
  project: Type.String(),
  user: Type.String(),
  name: Type.String(),
  kind: Type.String(),
  status: RunStatus,
  statusMessage: Type.String(),
  terminationReason: Type.Union([Type.String(), Type.Null()]),
  priority: Type.Integer(),
  generation: Type.Integer(),
  /** 1, then one more for each resubmission under the run's retry policy. */
  attempt: Type.Integer({ minimum: 1 }),
  spec: JsonObject,
  fleet: Type.Union([Type.String(), Type.Null()]),
  instance: Type.Union([Type.String(), Type.Null()]),
  gpu: Type.Union([GpuInfo, Type.Null()]),
  pricePerHour: Type.Union([Type.Number(), Type.Null()]),
  /** Dollars the run has cost so far, from the ledger (a service's: its replicas'; a multi-node task's: its nodes'). */
  cost: Type.Number(),
  exitCode: Type.Union([Type.Integer(), Type.Null()]),
  queuePosition: Type.Union([Type.Integer(), Type.Null()]),
  /** A service's replicas and where it is published; null for other kinds. */
  service: Type.Union([ServiceInfo, Type.Null()]),
  /** A multi-node task's nodes in rank order, once placed (then `gpu` is each node's, `pricePerHour` all of theirs); absent for other runs. */
  nodes: Type.Optional(Type.Array(RunNode)),
  /** A scheduled task (status `pending` between its runs) and when it submits them; absent for other runs. */
  schedule: Type.Optional(RunSchedule),
  /** The scheduled task that submitted this run, and the time it was due; absent for other runs. */
  scheduledBy: Type.Optional(Type.Object({ schedule: Type.String(), tick: Timestamp })),
  /** Null until the run's job runs on an instance whose agent gave a host key. */
  ssh: Type.Union([RunSsh, Type.Null()]),
  submittedAt: Timestamp,
  startedAt: NullableTimestamp,
  finishedAt: NullableTimestamp,
  /** When a running dev environment stops under inactivity_duration unless an SSH connection opens; null while one is open, and for other runs. */
  inactivityStopAt: NullableTimestamp,
});
export type Run = Static<typeof Run>;

/** The most runs `GET …/runs` answers with: the project's newest (live ones, or all with `all=true`). */
export const RUN_LIST_LIMIT = 1000;

/** What an event is about; `GET …/events?kind=` filters by it. */
export const EventObjectKind = Type.Union([Type.Literal('fleet'), Type.Literal('instance'), Type.Literal('run'), Type.Literal('gateway'), Type.Literal('project')]);
export type EventObjectKind = Static<typeof EventObjectKind>;

/** The most events one `GET …/events` answers (`limit`, 200 when left out): the newest of those that match, oldest first. */
export const MAX_EVENTS_LIMIT = 1000;

export const Event = Type.Object({
  id: Type.Integer(),
  objectKind: Type.String(),
  objectName: Type.String(),
  reason: Type.String(),
  message: Type.String(),
  createdAt: Timestamp,
});
export type Event = Static<typeof Event>;

export const LogLine = Type.Object({
  seq: Type.Integer(),
  ts: Timestamp,
  stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr')]),
  text: Type.String(),
  /** In the logs of a multi-node task, the rank of the node that printed it; `seq` counts that node's lines. */
  node: Type.Optional(Type.Integer({ minimum: 0 })),
});
export type LogLine = Static<typeof LogLine>;

/** A page of a run's stored lines, `GET .../logs?after=N`. */
export const RunLogsPage = Type.Object({
  lines: Type.Array(LogLine),
  /** The cursor to ask for the lines after these. */
  next: Type.Integer(),
  /** The last line that existed when the page was read: a reader that stops there prints what existed at that moment. */
  last: Type.Integer(),
  /** Lines that no longer exist between `after` and the first line here (over the run's limit, or lost at the agent). */
  dropped: Type.Integer(),
});
export type RunLogsPage = Static<typeof RunLogsPage>;

/** One line of a followed log stream (NDJSON): a log line, or the run's status when it changes. */
export const LogStreamItem = Type.Union([
  Type.Object({ type: Type.Literal('log'), line: LogLine }),
  Type.Object({
    type: Type.Literal('status'), status: RunStatus, statusMessage: Type.String(), exitCode: Type.Union([Type.Integer(), Type.Null()]),
    /** Which attempt of the run under `retry` the stream follows; a later attempt is followed by asking again. */
    attempt: Type.Integer({ minimum: 1 }),
  }),
]);
export type LogStreamItem = Static<typeof LogStreamItem>;

export const PlannedOffer = Type.Composite([Offer, Type.Object({ fleet: Type.String() })]);
export type PlannedOffer = Static<typeof PlannedOffer>;

export const RunPlan = Type.Object({
  /** `update`: a live service or scheduled task of that name takes the new spec (a service: rolling, or replicas in place). */
  action: Type.Union([Type.Literal('create'), Type.Literal('replace'), Type.Literal('update')]),
  name: Type.Union([Type.String(), Type.Null()]),
  requirement: Type.String(),
  fleets: Type.Array(Type.String()),
  /** An instance the run would take: an idle one, or one still starting that it would wait for. */
  instance: Type.Union([Type.Object({
    state: Type.Union([Type.Literal('idle'), Type.Literal('starting')]),
    /** Null when runs queued before this one may take that instance first. */
    name: Type.Union([Type.String(), Type.Null()]),
    fleet: Type.String(),
    gpu: Type.Union([GpuInfo, Type.Null()]),
    pricePerHour: Type.Union([Type.Number(), Type.Null()]),
    /** On an instance shared in blocks: the blocks the run would take, such as `block 1 of 2`; `gpu` is then theirs. */
    blocks: Type.Optional(Type.String()),
  }), Type.Null()]),
  /** Runs of the project queued before this one (as high a priority, submitted earlier). */
  queuedBefore: Type.Integer({ minimum: 0 }),
  /** Dollars per hour the run would pay: its instance's price, or the cheapest offer's for a new one (all nodes'); null when unknown. */
  pricePerHour: Type.Union([Type.Number(), Type.Null()]),
  /** The project's budget, and how long it lasts at the project's current burn plus this run; null without a budget. */
  budget: Type.Union([Type.Object({
    amount: Type.Number(),
    period: Type.String(),
    spent: Type.Number(),
    burnPerHour: Type.Number(),
    /** `3h 20m`, `spent`, or `for ever at this rate`. */
    lastsFor: Type.String(),
  }), Type.Null()]),
  /** How the instance it would land on runs jobs, where that is known before it runs. */
  runtime: Type.Union([JobRuntime, Type.Null()]),
  /** Fields of the spec that will not do what they say (see api/not-acted-on.ts). */
  notActedOn: Type.Array(FieldNotActedOn),
  /** The cheapest matching offers; `offersTotal` says how many match in all. */
  offers: Type.Array(PlannedOffer),
  offersTotal: Type.Integer({ minimum: 0 }),
  /** Backends whose offers could not be refreshed, with why and how old the offers shown are. */
  offerErrors: Type.Array(Type.String()),
  problem: Type.Union([Type.String(), Type.Null()]),
  /**
   * What the problem does to the run if it is submitted anyway: `fails` at once (no fleet matches it, no offers), or
   * waits until a fleet is applied for it (`no_fleet`); `name_in_use`: a live run has its name, and the server refuses
   * it. Null when there is no problem, or the run only waits its turn for capacity. `apply` submits a run that fails or
   * waits only when asked (`--queue`), and one whose name is in use never.
   */
  blocking: Type.Union([Type.Literal('fails'), Type.Literal('no_fleet'), Type.Literal('name_in_use'), Type.Null()]),
  /** For a scheduled task: when its first run (or, for an update, its next) will be submitted. */
  schedule: Type.Optional(Type.Object({ cron: Type.Array(Type.String()), nextRunAt: Timestamp })),
});
export type RunPlan = Static<typeof RunPlan>;

export const FleetPlan = Type.Object({
  action: Type.Union([Type.Literal('create'), Type.Literal('update'), Type.Literal('unchanged')]),
  name: Type.String(),
  requirement: Type.String(),
  currentGeneration: Type.Union([Type.Integer(), Type.Null()]),
  offers: Type.Array(Offer),
  offersTotal: Type.Integer({ minimum: 0 }),
  offerErrors: RunPlan.properties.offerErrors,
  problem: Type.Union([Type.String(), Type.Null()]),
});
export type FleetPlan = Static<typeof FleetPlan>;

/**
 * One object of `POST /api/projects/:p/apply`: a spec, and for a run the contents of its `files` and its
 * `repos` as the CLI read them (one per entry of the spec's repos; URL entries may be left out).
 */
export const ApplyItem = Type.Object({
  spec: Type.Unknown(),
  files: Type.Optional(Type.Array(JobFile)),
  repos: Type.Optional(Type.Array(JobRepo)),
}, { additionalProperties: false });
export type ApplyItem = Static<typeof ApplyItem>;

export const ApplyRequest = Type.Object({ items: Type.Array(ApplyItem, { minItems: 1 }) }, { additionalProperties: false });
export type ApplyRequest = Static<typeof ApplyRequest>;

/** What became of each item of an apply, in the order given. */
export const ApplyResult = Type.Object({
  items: Type.Array(Type.Union([
    Type.Object({ kind: Type.Literal('fleet'), action: FleetPlan.properties.action, fleet: Fleet }),
    Type.Object({ kind: Type.Literal('run'), run: Run }),
    Type.Object({ kind: Type.Literal('gateway'), action: FleetPlan.properties.action, gateway: Gateway }),
  ])),
});
export type ApplyResult = Static<typeof ApplyResult>;

export const ServerInfo = Type.Object({
  version: Type.String(),
  database: Type.Union([Type.Literal('postgres'), Type.Literal('pglite')]),
  user: Type.String(),
});
export type ServerInfo = Static<typeof ServerInfo>;

/** The console's sign-in, `POST /api/session`: a user token, exchanged for a session cookie. */
export const SessionRequest = Type.Object({ token: Type.String({ minLength: 1 }) });
export type SessionRequest = Static<typeof SessionRequest>;

/** A console session, `GET /api/session`: who is signed in, and the token that changes made with the cookie repeat. */
export const ConsoleSession = Type.Object({
  user: User,
  /** Sent back in the x-csrf-token header of every request that changes something. */
  csrfToken: Type.String(),
  expiresAt: Timestamp,
});
export type ConsoleSession = Static<typeof ConsoleSession>;
