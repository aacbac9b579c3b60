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

/**
 * The database's ledger_count(instances, runs), which store/ledger.ts#accrue and the ledger's triggers call;
 * `blocksSetting` is the SQL of the blocks setting (a number as text, or 'auto') of instance i of fleet f.
 */
function ledgerCount(blocksSetting: string): string {
  return `
-- Counts the instances' time since their last count: each one's to the run given beside it (the run holding it, its GPU
-- share: the GPUs it asked for over the instance's, or the whole; a replica's or node's to its service or task), to each
-- live run holding blocks of it (runs.blocks, migration 19, read only when this runs: its blocks over the instance's) and
-- the rest to its fleet (run_id ''), split at hour boundaries; closes the accounts of terminated instances. The accounts
-- are locked first, so that the count sees the holders as they are once no other count is under way, and no second
-- counts twice. A trigger counts one or two instances, a batch of the ledger controller many: PGlite plans every
-- statement at every call, and one statement over the batch plans in 1.5 ms, which a trigger would pay at each instance
-- taken or given back, so a few instances are counted one at a time in small statements (0.4 ms to plan), and a batch at
-- once (per instance, a 1 000-instance count took 20 times as long). Both ways give the same
-- count (test/ledger-count.test.ts).
CREATE OR REPLACE FUNCTION ledger_count(p_instances text[], p_runs text[]) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  counted integer := 0;
  k integer;
  account record;
  counted_until timestamptz;
  holder_ids text[];
  holder_shares float8[];
  block_holders text[];
  blocks_held integer[];
  blocks_setting text;
  blocks_total integer;
BEGIN
  PERFORM 1 FROM instance_accruals WHERE instance_id = ANY(p_instances) AND NOT closed ORDER BY instance_id FOR UPDATE;
  IF cardinality(p_instances) > 2 THEN
    WITH due AS (
      SELECT a.instance_id, a.price_per_hour, a.accrued_until AS from_t,
        greatest(a.accrued_until, CASE WHEN i.status = 'terminated' THEN coalesce(i.terminated_at, now()) ELSE now() END) AS until_t,
        i.status = 'terminated' AS closing, i.project_id, h.run_id AS whole_holder,
        coalesce((i.offer->'gpu'->>'count')::float8, 0) AS gpus,
        CASE WHEN b.blocks = 'auto' THEN greatest(1, coalesce((i.offer->'gpu'->>'count')::int, 0))
             ELSE coalesce(b.blocks::int, 1) END AS total_blocks
      FROM unnest(p_instances, p_runs) h(instance_id, run_id)
      JOIN instance_accruals a ON a.instance_id = h.instance_id
      JOIN instances i ON i.id = h.instance_id
      LEFT JOIN fleets f ON f.id = i.fleet_id
      LEFT JOIN LATERAL (SELECT ${blocksSetting} AS blocks) b ON true
      WHERE NOT a.closed
      FOR UPDATE OF a
    ), moved AS (
      UPDATE instance_accruals a SET accrued_until = d.until_t, closed = d.closing,
        seconds = a.seconds + EXTRACT(EPOCH FROM d.until_t - d.from_t),
        dollars = a.dollars + EXTRACT(EPOCH FROM d.until_t - d.from_t) * d.price_per_hour / 3600
      FROM due d WHERE a.instance_id = d.instance_id
      RETURNING 1
    ), holders AS (
      SELECT d.instance_id, coalesce(r.service_id, r.id) AS holder,
        CASE WHEN d.gpus = 0 OR coalesce((r.requirement->'gpu'->'count'->>'min')::float8, 0) = 0 THEN 1
             ELSE least(1, (r.requirement->'gpu'->'count'->>'min')::float8 / d.gpus) END AS share
      FROM due d JOIN runs r ON r.id = d.whole_holder
      UNION ALL
      SELECT d.instance_id, coalesce(r.service_id, r.id), least(1, cardinality(r.blocks)::float8 / d.total_blocks)
      FROM due d JOIN runs r ON r.instance_id = d.instance_id AND r.blocks IS NOT NULL
        AND r.status NOT IN ('terminated', 'failed', 'done') AND r.id IS DISTINCT FROM d.whole_holder
    ), shares AS (
      SELECT instance_id, holder, share FROM holders
      UNION ALL
      SELECT d.instance_id, '', 1 - coalesce(taken.share, 0)
      FROM due d LEFT JOIN (SELECT instance_id, sum(share) AS share FROM holders GROUP BY instance_id) taken ON taken.instance_id = d.instance_id
    ), pieces AS (
      SELECT d.instance_id, d.project_id, d.price_per_hour, h AS piece_hour,
        EXTRACT(EPOCH FROM least(h + interval '1 hour', d.until_t) - greatest(h, d.from_t))::float8 AS secs
      FROM due d, generate_series(date_trunc('hour', d.from_t), d.until_t, interval '1 hour') h
      WHERE d.until_t > d.from_t AND least(h + interval '1 hour', d.until_t) > greatest(h, d.from_t)
    ), written AS (
      INSERT INTO cost_hours (hour, instance_id, run_id, project_id, seconds, dollars)
      SELECT p.piece_hour, p.instance_id, s.holder, p.project_id, sum(p.secs * s.share), sum(p.secs * s.share * p.price_per_hour / 3600)
      FROM pieces p JOIN shares s ON s.instance_id = p.instance_id AND s.share > 1e-9
      GROUP BY p.piece_hour, p.instance_id, s.holder, p.project_id
      ON CONFLICT ON CONSTRAINT cost_hours_pkey DO UPDATE
        SET seconds = cost_hours.seconds + excluded.seconds, dollars = cost_hours.dollars + excluded.dollars
      RETURNING 1
    )
    SELECT (SELECT count(*) FROM moved) + 0 * (SELECT count(*) FROM written) INTO counted;
    RETURN counted;
  END IF;
  FOR k IN 1 .. coalesce(array_length(p_instances, 1), 0) LOOP
    SELECT a.price_per_hour, a.accrued_until AS from_t, i.status = 'terminated' AS closing, i.terminated_at, i.project_id,
        coalesce((i.offer->'gpu'->>'count')::float8, 0) AS gpus
      INTO account FROM instance_accruals a JOIN instances i ON i.id = a.instance_id
      WHERE a.instance_id = p_instances[k] AND NOT a.closed;
    CONTINUE WHEN NOT FOUND;
    counted_until := greatest(account.from_t, CASE WHEN account.closing THEN coalesce(account.terminated_at, now()) ELSE now() END);
    UPDATE instance_accruals SET accrued_until = counted_until, closed = account.closing,
      seconds = seconds + EXTRACT(EPOCH FROM counted_until - account.from_t),
      dollars = dollars + EXTRACT(EPOCH FROM counted_until - account.from_t) * account.price_per_hour / 3600
    WHERE instance_id = p_instances[k];
    counted := counted + 1;
    CONTINUE WHEN counted_until <= account.from_t;
    holder_ids := '{}';
    holder_shares := '{}';
    IF p_runs[k] <> '' THEN
      SELECT ARRAY[coalesce(r.service_id, r.id)],
          ARRAY[CASE WHEN account.gpus = 0 OR coalesce((r.requirement->'gpu'->'count'->>'min')::float8, 0) = 0 THEN 1
                ELSE least(1, (r.requirement->'gpu'->'count'->>'min')::float8 / account.gpus) END]
        INTO holder_ids, holder_shares FROM runs r WHERE r.id = p_runs[k];
      holder_ids := coalesce(holder_ids, '{}');
      holder_shares := coalesce(holder_shares, '{}');
    END IF;
    SELECT array_agg(coalesce(r.service_id, r.id)), array_agg(cardinality(r.blocks)) INTO block_holders, blocks_held
      FROM runs r WHERE r.instance_id = p_instances[k] AND r.blocks IS NOT NULL
        AND r.status NOT IN ('terminated', 'failed', 'done') AND r.id IS DISTINCT FROM p_runs[k];
    IF block_holders IS NOT NULL THEN
      SELECT ${blocksSetting} INTO blocks_setting FROM instances i LEFT JOIN fleets f ON f.id = i.fleet_id WHERE i.id = p_instances[k];
      blocks_total := CASE WHEN blocks_setting = 'auto' THEN greatest(1, account.gpus::int) ELSE coalesce(blocks_setting::int, 1) END;
      FOR j IN 1 .. array_length(block_holders, 1) LOOP
        holder_ids := holder_ids || block_holders[j];
        holder_shares := holder_shares || least(1, blocks_held[j]::float8 / blocks_total);
      END LOOP;
    END IF;
    holder_ids := holder_ids || ''::text;
    holder_shares := holder_shares || (1 - coalesce((SELECT sum(x) FROM unnest(holder_shares) x), 0));
    INSERT INTO cost_hours (hour, instance_id, run_id, project_id, seconds, dollars)
    SELECT p.hour, p_instances[k], s.holder, account.project_id, sum(p.secs * s.share), sum(p.secs * s.share * account.price_per_hour / 3600)
    FROM unnest(holder_ids, holder_shares) s(holder, share),
      (SELECT h AS hour, EXTRACT(EPOCH FROM least(h + interval '1 hour', counted_until) - greatest(h, account.from_t))::float8 AS secs
       FROM generate_series(date_trunc('hour', account.from_t), counted_until, interval '1 hour') h) p
    WHERE s.share > 1e-9 AND p.secs > 0
    GROUP BY p.hour, s.holder
    ON CONFLICT ON CONSTRAINT cost_hours_pkey DO UPDATE
      SET seconds = cost_hours.seconds + excluded.seconds, dollars = cost_hours.dollars + excluded.dollars;
  END LOOP;
  RETURN counted;
END $$;
`;
}

/** The fleet's `blocks` (migration 14). */
const FLEET_BLOCKS = `f.spec->>'blocks'`;

/** An SSH host's own `blocks` (ssh_config.hosts[].blocks, matched by hostname and port as api/ssh-fleet.ts#sshHosts does), else the fleet's (migration 26). */
const HOST_BLOCKS = `coalesce(
      (SELECT h->>'blocks' FROM jsonb_array_elements(f.spec->'ssh_config'->'hosts') h
       WHERE jsonb_typeof(h) = 'object' AND h->>'hostname' = i.ssh_host->>'hostname'
         AND coalesce(h->>'port', f.spec->'ssh_config'->>'port', '22') = i.ssh_host->>'port'
       LIMIT 1),
      f.spec->>'blocks')`;

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
    version: 14,
    name: 'ledger: each instance accrues its price from its creation at the backend to its confirmed termination, in hourly pieces per run that held it',
    sql: `
CREATE TABLE instance_accruals (
  instance_id text PRIMARY KEY REFERENCES instances(id) ON DELETE CASCADE,
  price_per_hour float8 NOT NULL,
  started_at timestamptz NOT NULL,
  accrued_until timestamptz NOT NULL,
  closed boolean NOT NULL DEFAULT false,
  seconds float8 NOT NULL DEFAULT 0,
  dollars float8 NOT NULL DEFAULT 0
);
CREATE INDEX instance_accruals_open ON instance_accruals (instance_id) WHERE NOT closed;
CREATE TABLE cost_hours (
  hour timestamptz NOT NULL,
  instance_id text NOT NULL REFERENCES instances(id) ON DELETE CASCADE,
  run_id text NOT NULL DEFAULT '',
  project_id text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  seconds float8 NOT NULL,
  dollars float8 NOT NULL,
  PRIMARY KEY (instance_id, hour, run_id)
);
CREATE INDEX cost_hours_project ON cost_hours (project_id, hour);
CREATE INDEX cost_hours_run ON cost_hours (run_id) WHERE run_id <> '';
${ledgerCount(FLEET_BLOCKS)}-- A run taking or giving back an instance: the time until now is the holder's before the holder changes.
CREATE FUNCTION ledger_holder_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM ledger_count(ARRAY[OLD.id], ARRAY[OLD.run_id]);
  RETURN NEW;
END $$;
CREATE TRIGGER instances_holder_changed BEFORE UPDATE OF run_id ON instances FOR EACH ROW
  WHEN (OLD.run_id IS DISTINCT FROM NEW.run_id) EXECUTE FUNCTION ledger_holder_changed();
INSERT INTO instance_accruals (instance_id, price_per_hour, started_at, accrued_until)
  SELECT id, coalesce((offer->>'pricePerHour')::float8, 0), provisioning_started_at, provisioning_started_at
  FROM instances WHERE provisioning_started_at IS NOT NULL AND offer IS NOT NULL;
`,
  },
  {
    version: 15,
    name: 'budgets: a project\'s budget per calendar period, and the alerts already given in each period',
    sql: `
CREATE TABLE project_budgets (
  project_id text PRIMARY KEY REFERENCES projects(id) ON DELETE CASCADE,
  amount float8 NOT NULL,
  period text NOT NULL,
  on_exceed text NOT NULL,
  alerts jsonb NOT NULL,
  source text NOT NULL,
  spent float8 NOT NULL DEFAULT 0,
  period_start timestamptz,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE budget_notices (
  project_id text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  period_start timestamptz NOT NULL,
  reason text NOT NULL,
  percent integer NOT NULL,
  PRIMARY KEY (project_id, period_start, reason, percent)
);
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
    version: 18,
    name: 'SSH fleets: the host each instance is, its internal address, the host keys seen first, and when a fleet was last applied',
    sql: `
ALTER TABLE instances ADD COLUMN ssh_host jsonb;
ALTER TABLE instances ADD COLUMN internal_ip text;
ALTER TABLE fleets ADD COLUMN applied_at timestamptz NOT NULL DEFAULT now();
CREATE TABLE ssh_host_keys (
  fleet_id text NOT NULL REFERENCES fleets(id) ON DELETE CASCADE,
  address text NOT NULL,
  public_key text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (fleet_id, address)
);
`,
  },
  {
    version: 19,
    name: 'cluster placement and blocks: the backend cluster a fleet\'s instances are created in, and the blocks of its instance a run holds',
    sql: `
ALTER TABLE fleets ADD COLUMN cluster jsonb;
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
  {
    version: 23,
    name: 'ledger: runs holding blocks of a shared instance are charged their blocks\' share of it while they hold them',
    sql: `
-- A run taking or giving back blocks of a shared instance (or ending while it holds them): the time until now is
-- counted with the holders as they were.
CREATE FUNCTION ledger_blocks_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM ledger_count(array_agg(i.id), array_agg(i.run_id)) FROM instances i WHERE i.id IN (OLD.instance_id, NEW.instance_id);
  RETURN NEW;
END $$;
CREATE INDEX runs_holding_blocks ON runs (instance_id) WHERE blocks IS NOT NULL AND status NOT IN ('terminated', 'failed', 'done');
CREATE TRIGGER runs_blocks_changed BEFORE UPDATE OF status, blocks, instance_id ON runs FOR EACH ROW
  WHEN ((OLD.blocks IS NOT NULL AND OLD.instance_id IS NOT NULL AND OLD.status NOT IN ('terminated', 'failed', 'done'))
     OR (NEW.blocks IS NOT NULL AND NEW.instance_id IS NOT NULL AND NEW.status NOT IN ('terminated', 'failed', 'done')))
  EXECUTE FUNCTION ledger_blocks_changed();
`,
  },
  {
    version: 25,
    name: 'ledger: the hourly pieces summed per UTC day, with the name and user of the run that held the instance, for reports',
    sql: `
-- An instance's pieces before rolled_until are summed in cost_days (store/ledger.ts#rollDays); only hours its account's
-- counts are done with are rolled, so a piece is never added to its day and then grown.
ALTER TABLE instance_accruals ADD COLUMN rolled_until timestamptz NOT NULL DEFAULT '-infinity';
CREATE INDEX instance_accruals_unrolled ON instance_accruals (instance_id) WHERE rolled_until <> 'infinity';
-- Keyed like cost_hours, by instance; run_name and user_id are the holder's ('' for the fleet's time).
CREATE TABLE cost_days (
  day timestamptz NOT NULL,
  instance_id text NOT NULL REFERENCES instances(id) ON DELETE CASCADE,
  run_id text NOT NULL,
  project_id text NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
  run_name text NOT NULL,
  user_id text NOT NULL,
  seconds float8 NOT NULL,
  dollars float8 NOT NULL,
  PRIMARY KEY (instance_id, day, run_id)
);
CREATE INDEX cost_days_project ON cost_days (project_id, day);
`,
  },
  {
    version: 26,
    name: 'fleets: nodes.target, the instances apply provisions before the fleet falls back to keeping nodes.min; ledger: an SSH host\'s own blocks split its time',
    sql: `
ALTER TABLE fleets ADD COLUMN nodes_target integer;
ALTER TABLE fleets ADD COLUMN provision_target integer;
${ledgerCount(HOST_BLOCKS)}`,
  },
  {
    version: 27,
    name: 'ledger: a count sums the shares its holders took per instance once, not once per instance, and accounts and hourly pieces keep room for their updates on their page; an index of the blocks each project\'s runs hold',
    sql: `
-- The fleet's share of each instance was a subquery over every holder of the count, per instance (1 000 instances: a
-- million rows, half of a count's time); now it is one grouping of the holders.
${ledgerCount(HOST_BLOCKS)}-- An account, and its instance's piece of the hour, are updated at every count, and the embedded database has no
-- autovacuum: with room on its page the new version goes there (a HOT update, no index touched) and the old one is
-- pruned in place, instead of each table and its three indexes growing by every instance at every count.
ALTER TABLE instance_accruals SET (fillfactor = 50);
ALTER TABLE cost_hours SET (fillfactor = 50);
-- The scheduler reads the blocks a project's live runs hold at every pass (store/runs.ts#blocksHeld).
CREATE INDEX runs_blocks_held ON runs (project_id) WHERE blocks IS NOT NULL AND instance_id IS NOT NULL AND status NOT IN ('terminated', 'failed', 'done');
`,
  },
  {
    version: 28,
    name: 'runs: the rows each claim of the start loop, the service controller and the nodes controller looks for, indexed apart from the running jobs the watch holds',
    sql: `
-- These loops claimed through runs_active_due (or a scan of the table), walking every active run due by its
-- next_reconcile_at, thousands of them held by the watch, to take the few that are theirs (bench/README.md, "Claims
-- that no longer walk the watched runs"). Their conditions (controllers/run-controller.ts, service-controller.ts,
-- nodes-controller.ts) imply each predicate, so each claim reads its own few rows.
CREATE INDEX runs_provisioning_due ON runs (next_reconcile_at) WHERE status = 'provisioning';
CREATE INDEX runs_service_parents_due ON runs (next_reconcile_at) WHERE kind = 'service' AND service_id IS NULL;
CREATE INDEX runs_multi_node_parents_due ON runs (next_reconcile_at)
  WHERE kind = 'task' AND service_id IS NULL AND coalesce((spec->>'nodes')::int, 1) > 1;
`,
  },
  {
    version: 29,
    name: 'log_chunks: no foreign key of their own to runs; their run is checked through log_totals',
    sql: `
-- Its check locked the run's row (FOR KEY SHARE, a write to the row and to the WAL) for every chunk stored: half of
-- each log store's time (bench/README.md, "Log stores without a lock on their run"). Chunks are written only by
-- store/logs.ts#appendLogChunks, in the statement that upserts the run's log_totals row, whose own foreign key checks
-- the run when that row is made; a store for a run that does not exist fails whole. Runs are never deleted (a deleted
-- run is marked so), so nothing cascaded through it.
ALTER TABLE log_chunks DROP CONSTRAINT log_chunks_run_id_fkey;
`,
  },
  {
    version: 30,
    name: 'runs: the active runs of a project in the order ps lists them, the newest first',
    sql: `
-- ps read every live run of the project to keep the newest 1 000 active ones (bench/README.md, "The run list: its runs
-- chosen before they are joined"). Only the active list has an index: each index of runs costs every update that moves
-- a run's next_reconcile_at (the renewal of a held lease, a claim) an entry more, and a list with finished runs is rarer.
CREATE INDEX runs_listed_active ON runs (project_id, submitted_at DESC, id DESC)
  WHERE NOT deleted AND service_id IS NULL AND status NOT IN ('terminated', 'failed', 'done');
`,
  },
  {
    version: 31,
    name: 'ledger: a trigger\'s count of one or two instances made of small statements, one instance at a time',
    sql: `
-- The count was one statement of six parts, which the embedded database planned again at every call: 1.5 ms of its
-- 2 ms at every instance a run took or gave back. A batch of the ledger controller still counts in that statement.
${ledgerCount(HOST_BLOCKS)}`,
  },
  {
    version: 32,
    name: 'runs: the replicas in rotation, which the routing table reads',
    sql: `
-- Without it the embedded database, never analysed, read the routing table's replicas through runs_active_due and
-- filtered every active run: 21-28 ms at 10 000 runs, once a second and at every change of a service's runs
-- (bench/README.md, "The routing table's replicas read by their own index").
CREATE INDEX runs_in_rotation ON runs (service_id)
  WHERE service_id IS NOT NULL AND status = 'running' AND ready_at IS NOT NULL AND draining_since IS NULL;
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

/** The statements of a migration, split at `;` ending a line, except inside a $$-quoted function body. */
function splitStatements(sql: string): string[] {
  const statements: string[] = [];
  let current = '';
  sql.split('$$').forEach((part, index) => {
    if (index % 2 === 1) {
      current += `$$${part}$$`;
      return;
    }
    const [first, ...rest] = part.split(/;\s*\n/);
    current += first;
    for (const piece of rest) {
      statements.push(current);
      current = piece;
    }
  });
  statements.push(current);
  return statements.map((s) => s.trim()).filter((s) => s.length > 0);
}
