import type { Db } from './db.js';

interface Migration {
  version: number;
  name: string;
  sql: string;
}

const lease = `
  lease_owner text,
  lease_expires_at timestamptz,
  next_reconcile_at timestamptz NOT NULL DEFAULT now()`;

export const MIGRATIONS: Migration[] = [
  {
    version: 1,
    name: 'initial schema',
    sql: `
CREATE TABLE projects (
  id text PRIMARY KEY,
  name text NOT NULL UNIQUE,
  backends jsonb NOT NULL DEFAULT '[]',
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE users (
  id text PRIMARY KEY,
  name text NOT NULL UNIQUE,
  token_hash text NOT NULL UNIQUE,
  global_role text NOT NULL DEFAULT 'user',
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE memberships (
  project_id text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  user_id text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  role text NOT NULL DEFAULT 'user',
  PRIMARY KEY (project_id, user_id)
);
CREATE TABLE fleets (
  id text PRIMARY KEY,
  project_id text NOT NULL REFERENCES projects(id),
  name text NOT NULL,
  spec jsonb NOT NULL,
  requirement jsonb NOT NULL,
  nodes_min integer NOT NULL,
  nodes_max integer,
  idle_seconds integer,
  backends jsonb NOT NULL,
  generation integer NOT NULL DEFAULT 1,
  status text NOT NULL,
  status_message text NOT NULL DEFAULT '',
  deleted boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),${lease}
);
CREATE UNIQUE INDEX fleets_live_name ON fleets (project_id, name) WHERE status NOT IN ('terminated', 'failed');
CREATE TABLE instances (
  id text PRIMARY KEY,
  project_id text NOT NULL REFERENCES projects(id),
  fleet_id text NOT NULL REFERENCES fleets(id),
  name text NOT NULL,
  backend text NOT NULL,
  requirement jsonb NOT NULL,
  offer jsonb,
  backend_instance_id text,
  agent_url text,
  agent_token text NOT NULL,
  status text NOT NULL,
  status_message text NOT NULL DEFAULT '',
  termination_reason text,
  run_id text,
  idle_since timestamptz,
  provisioning_started_at timestamptz,
  unreachable_since timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  terminated_at timestamptz,${lease}
);
CREATE INDEX instances_fleet ON instances (fleet_id) WHERE status <> 'terminated';
CREATE INDEX instances_due ON instances (next_reconcile_at) WHERE status <> 'terminated';
CREATE TABLE runs (
  id text PRIMARY KEY,
  project_id text NOT NULL REFERENCES projects(id),
  user_id text NOT NULL REFERENCES users(id),
  name text NOT NULL,
  kind text NOT NULL,
  spec jsonb NOT NULL,
  files jsonb NOT NULL DEFAULT '[]',
  requirement jsonb NOT NULL,
  generation integer NOT NULL DEFAULT 1,
  priority integer NOT NULL DEFAULT 0,
  status text NOT NULL,
  status_message text NOT NULL DEFAULT '',
  termination_reason text,
  desired text NOT NULL DEFAULT 'run',
  fleet_id text REFERENCES fleets(id),
  instance_id text REFERENCES instances(id),
  job_id text,
  exit_code integer,
  deleted boolean NOT NULL DEFAULT false,
  submitted_at timestamptz NOT NULL DEFAULT now(),
  started_at timestamptz,
  finished_at timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now(),${lease}
);
CREATE UNIQUE INDEX runs_live_name ON runs (project_id, name) WHERE NOT deleted;
CREATE INDEX runs_queue ON runs (priority DESC, submitted_at, id) WHERE status = 'submitted';
CREATE INDEX runs_active_due ON runs (next_reconcile_at) WHERE status IN ('provisioning', 'running', 'terminating');
CREATE TABLE logs (
  run_id text NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  seq integer NOT NULL,
  ts timestamptz NOT NULL,
  stream text NOT NULL,
  text text NOT NULL,
  PRIMARY KEY (run_id, seq)
);
CREATE TABLE events (
  id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  project_id text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  object_kind text NOT NULL,
  object_id text NOT NULL,
  object_name text NOT NULL,
  reason text NOT NULL,
  message text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_project ON events (project_id, id);
`,
  },
  {
    version: 2,
    name: 'logs in chunks, with a per-run total',
    sql: `
CREATE TABLE log_chunks (
  run_id text NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  first_seq integer NOT NULL,
  last_seq integer NOT NULL,
  bytes integer NOT NULL,
  encoding text NOT NULL,
  data bytea NOT NULL,
  PRIMARY KEY (run_id, first_seq)
);
CREATE TABLE log_totals (
  run_id text PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  last_seq integer NOT NULL DEFAULT 0,
  bytes bigint NOT NULL DEFAULT 0,
  dropped_lines integer NOT NULL DEFAULT 0
);
INSERT INTO log_chunks (run_id, first_seq, last_seq, bytes, encoding, data)
SELECT run_id, first_seq, last_seq, octet_length(lines), 'identity', convert_to(lines, 'UTF8') FROM (
  SELECT run_id, min(seq) AS first_seq, max(seq) AS last_seq,
    string_agg(json_build_object('seq', seq, 'ts', ts, 'stream', stream, 'text', text)::text, E'\n' ORDER BY seq) AS lines
  FROM logs GROUP BY run_id, (seq - 1) / 5000
) AS grouped;
INSERT INTO log_totals (run_id, last_seq, bytes)
SELECT run_id, max(last_seq), sum(bytes) FROM log_chunks GROUP BY run_id;
DROP TABLE logs;
`,
  },
  {
    version: 3,
    name: 'deleted users keep their row for their runs, and free their name and token',
    sql: `
ALTER TABLE users ADD COLUMN deleted_at timestamptz;
ALTER TABLE users ALTER COLUMN token_hash DROP NOT NULL;
ALTER TABLE users DROP CONSTRAINT users_name_key;
CREATE UNIQUE INDEX users_live_name ON users (name) WHERE deleted_at IS NULL;
`,
  },
  {
    version: 4,
    name: 'services: replicas as runs of a service, and request statistics',
    sql: `
ALTER TABLE runs ADD COLUMN service_id text REFERENCES runs(id);
ALTER TABLE runs ADD COLUMN replica integer;
ALTER TABLE runs ADD COLUMN ready_at timestamptz;
ALTER TABLE runs ADD COLUMN draining_since timestamptz;
ALTER TABLE runs ADD COLUMN desired_replicas integer;
ALTER TABLE runs ADD COLUMN scaled_at timestamptz;
ALTER TABLE runs ADD COLUMN replica_failures integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN replaced_at timestamptz;
DROP INDEX runs_live_name;
CREATE UNIQUE INDEX runs_live_name ON runs (project_id, name) WHERE NOT deleted AND service_id IS NULL;
CREATE INDEX runs_replicas ON runs (service_id, replica) WHERE service_id IS NOT NULL;
CREATE TABLE service_stats (
  run_id text NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  second timestamptz NOT NULL,
  source text NOT NULL,
  requests integer NOT NULL,
  errors integer NOT NULL,
  inflight integer NOT NULL,
  latency jsonb NOT NULL,
  PRIMARY KEY (run_id, second, source)
);
CREATE INDEX service_stats_second ON service_stats (second);
`,
  },
  {
    version: 5,
    name: 'ssh: users\' public keys, and each instance\'s host key',
    sql: `
CREATE TABLE ssh_keys (
  user_id text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  public_key text NOT NULL,
  fingerprint text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (user_id, fingerprint)
);
ALTER TABLE instances ADD COLUMN ssh_host_key text;
`,
  },
  {
    version: 6,
    name: 'dev environments: when inactivity_duration stops one, as last seen on its agent',
    sql: `
ALTER TABLE runs ADD COLUMN inactivity_stop_at timestamptz;
`,
  },
  {
    version: 7,
    name: 'secrets: values encrypted with the server key (AES-256-GCM), per project',
    sql: `
CREATE TABLE secrets (
  project_id text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  name text NOT NULL,
  sealed text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (project_id, name)
);
`,
  },
  {
    version: 8,
    name: 'policies: retry attempts of a run, and since when its GPUs stay below utilization_policy',
    sql: `
ALTER TABLE runs ADD COLUMN attempt integer NOT NULL DEFAULT 1;
ALTER TABLE runs ADD COLUMN first_submitted_at timestamptz;
ALTER TABLE runs ADD COLUMN gpu_underused_since timestamptz;
`,
  },
  {
    version: 9,
    name: 'inputs: the repos of a run as its agent checks them out (commit, uncommitted changes or uploaded tree)',
    sql: `
ALTER TABLE runs ADD COLUMN repos jsonb NOT NULL DEFAULT '[]';
`,
  },
  {
    version: 10,
    name: 'schedules: a scheduled task waits as a pending run for its next tick; the runs it submits name it and their tick',
    sql: `
ALTER TABLE runs ADD COLUMN next_tick_at timestamptz;
ALTER TABLE runs ADD COLUMN schedule_id text REFERENCES runs(id);
ALTER TABLE runs ADD COLUMN scheduled_for timestamptz;
CREATE UNIQUE INDEX runs_schedule_ticks ON runs (schedule_id, scheduled_for) WHERE schedule_id IS NOT NULL AND NOT deleted;
CREATE INDEX runs_pending_due ON runs (next_reconcile_at) WHERE status = 'pending';
`,
  },
  {
    version: 11,
    name: 'gateways: a project\'s gateways, the process that runs each, and its certificates (keys sealed with the server key)',
    sql: `
CREATE TABLE gateways (
  id text PRIMARY KEY,
  project_id text NOT NULL REFERENCES projects(id),
  name text NOT NULL,
  spec jsonb NOT NULL,
  domain text NOT NULL,
  is_default boolean NOT NULL DEFAULT false,
  generation integer NOT NULL DEFAULT 1,
  status text NOT NULL,
  status_message text NOT NULL DEFAULT '',
  token_hash text UNIQUE,
  process jsonb,
  address text,
  last_seen_at timestamptz,
  acme_account_key text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),${lease}
);
CREATE UNIQUE INDEX gateways_live_name ON gateways (project_id, name) WHERE status <> 'deleted';
CREATE UNIQUE INDEX gateways_live_domain ON gateways (domain) WHERE status <> 'deleted';
CREATE TABLE gateway_certificates (
  gateway_id text NOT NULL REFERENCES gateways(id) ON DELETE CASCADE,
  hostname text NOT NULL,
  certificate text,
  private_key text,
  not_before timestamptz,
  not_after timestamptz,
  error text,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (gateway_id, hostname)
);
`,
  },
  {
    version: 12,
    name: 'services: the generation that last served whole, and a rollout that stalled while it serves',
    sql: `
ALTER TABLE runs ADD COLUMN stable_generation integer;
ALTER TABLE runs ADD COLUMN rollout_stall jsonb;
UPDATE runs s SET stable_generation = coalesce(
    (SELECT max(r.generation) FROM runs r WHERE r.service_id = s.id AND r.ready_at IS NOT NULL),
    CASE WHEN s.started_at IS NOT NULL THEN s.generation END)
  WHERE s.kind = 'service' AND s.service_id IS NULL;
`,
  },
  {
    version: 13,
    name: 'console sessions: a browser\'s sign-in, kept as the hash of its cookie, with an expiry',
    sql: `
CREATE TABLE console_sessions (
  token_hash text PRIMARY KEY,
  user_id text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
`,
  },
  {
    version: 16,
    name: 'webhooks: per project, with a sealed signing secret and a cursor over events; deliveries as a leased queue, and their tries',
    sql: `
CREATE TABLE webhooks (
  id text PRIMARY KEY,
  project_id text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  url text NOT NULL,
  events jsonb NOT NULL,
  sealed_secret text NOT NULL,
  last_event_id integer NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_project ON webhooks (project_id);
CREATE TABLE webhook_deliveries (
  id text PRIMARY KEY,
  webhook_id text NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
  event_id integer NOT NULL,
  type text NOT NULL,
  body text NOT NULL,
  status text NOT NULL DEFAULT 'pending',
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  give_up_at timestamptz NOT NULL,
  lease_owner text,
  lease_expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE TABLE webhook_tries (
  delivery_id text NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
  attempt integer NOT NULL,
  at timestamptz NOT NULL,
  status_code integer,
  latency_ms integer NOT NULL,
  error text,
  PRIMARY KEY (delivery_id, attempt)
);
`,
  },
  {
    version: 19,
    name: 'cluster placement and blocks: the backend cluster a fleet\'s instances are created in, each instance\'s address in it, and the blocks of its instance a run holds',
    sql: `
ALTER TABLE fleets ADD COLUMN cluster jsonb;
ALTER TABLE instances ADD COLUMN internal_ip text;
ALTER TABLE runs ADD COLUMN blocks integer[];
`,
  },
  {
    version: 22,
    name: 'service replica groups: the group of each replica and the service spec it was made from, and the replica count each group aims for',
    sql: `
ALTER TABLE runs ADD COLUMN replica_group text;
ALTER TABLE runs ADD COLUMN service_spec jsonb;
ALTER TABLE runs ADD COLUMN group_replicas jsonb;
`,
  },
];

const MIGRATION_LOCK = 4_243_001;

/** Applies pending migrations in one transaction under an advisory lock, so concurrent servers migrate once. */
export async function migrate(db: Db): Promise<number[]> {
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await tx.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const applied = new Set((await tx.query<{ version: number }>('SELECT version FROM schema_migrations')).map((r) => r.version));
    const done: number[] = [];
    for (const migration of MIGRATIONS) {
      if (applied.has(migration.version)) continue;
      for (const statement of splitStatements(migration.sql)) await tx.query(statement);
      await tx.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [migration.version, migration.name]);
      done.push(migration.version);
    }
    return done;
  });
}

function splitStatements(sql: string): string[] {
  return sql.split(/;\s*\n/).map((s) => s.trim()).filter((s) => s.length > 0);
}
