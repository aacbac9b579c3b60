import { randomUUID } from 'node:crypto';
import type { Webhook, WebhookDelivery, WebhookTry } from '../api/webhooks.js';
import type { Queryable, Row } from './db.js';
import type { SecretBox } from './secrets.js';

/** The name a webhook's secret is sealed under: bound to the webhook, and never a project secret's (those take no slash). */
const sealedName = (webhookId: string) => `webhook/${webhookId}`;

const toWebhook = (row: Row): Webhook => ({ id: row.id, url: row.url, events: row.events, createdAt: row.created_at.toISOString() });

/** Adds a webhook that receives the project's events from now on (its cursor starts at the newest event). */
export async function insertWebhook(db: Queryable, box: SecretBox, projectId: string, hook: { url: string; events: string[]; secret: string }): Promise<Webhook> {
  const id = randomUUID();
  const rows = await db.query(
    `INSERT INTO webhooks (id, project_id, url, events, sealed_secret, last_event_id)
     VALUES ($1, $2, $3, $4::jsonb, $5, (SELECT coalesce(max(id), 0) FROM events)) RETURNING *`,
    [id, projectId, hook.url, hook.events, box.seal(projectId, sealedName(id), hook.secret)]);
  return toWebhook(rows[0]!);
}

export async function listWebhooks(db: Queryable, projectId: string): Promise<Webhook[]> {
  return (await db.query('SELECT * FROM webhooks WHERE project_id = $1 ORDER BY created_at, id', [projectId])).map(toWebhook);
}

export async function getWebhook(db: Queryable, projectId: string, id: string): Promise<Webhook | null> {
  const rows = await db.query('SELECT * FROM webhooks WHERE project_id = $1 AND id = $2', [projectId, id]);
  return rows[0] ? toWebhook(rows[0]) : null;
}

/** Deletes the webhook with its deliveries and their tries; whether there was one. */
export async function deleteWebhook(db: Queryable, projectId: string, id: string): Promise<boolean> {
  return (await db.query('DELETE FROM webhooks WHERE project_id = $1 AND id = $2 RETURNING id', [projectId, id])).length > 0;
}

/**
 * The newest event id up to which every event is committed, as far as can be told: ids are handed out when an
 * event is inserted but become visible when its transaction commits, so a missing id may be one still on its way.
 * A gap is passed once the event after it is `settleMs` old; by then its transaction has committed or rolled back.
 */
export async function settledEventHorizon(db: Queryable, settleMs: number): Promise<number> {
  const [low] = await db.query<{ id: number | null }>('SELECT min(last_event_id) AS id FROM webhooks');
  if (low?.id === null || low?.id === undefined) return 0;
  const rows = await db.query<{ id: number; settled: boolean }>(
    `SELECT id, created_at < now() - $2 * interval '1 millisecond' AS settled FROM events WHERE id > $1 ORDER BY id LIMIT 1000`,
    [low.id, settleMs]);
  let horizon = low.id;
  for (const row of rows) {
    if (row.id !== horizon + 1 && !row.settled) break;
    horizon = row.id;
  }
  return horizon;
}

export interface WebhookCursor {
  id: string;
  events: string[];
  lastEventId: number;
}

/** The webhooks with events to read up to `horizon`, locked for this transaction; those another server reads now are skipped. */
export async function lockWebhooksBehind(tx: Queryable, horizon: number): Promise<WebhookCursor[]> {
  const rows = await tx.query(
    'SELECT id, events, last_event_id FROM webhooks WHERE last_event_id < $1 ORDER BY id FOR UPDATE SKIP LOCKED', [horizon]);
  return rows.map((r) => ({ id: r.id, events: r.events, lastEventId: r.last_event_id }));
}

export interface ProjectEvent {
  id: number;
  project: string;
  objectKind: string;
  objectId: string;
  objectName: string;
  reason: string;
  message: string;
  createdAt: Date;
}

/** The events of the webhook's project after its cursor, up to `horizon`, oldest first. */
export async function eventsForWebhook(tx: Queryable, webhookId: string, horizon: number, limit: number): Promise<ProjectEvent[]> {
  const rows = await tx.query(
    `SELECT e.*, p.name AS project FROM webhooks w JOIN events e ON e.project_id = w.project_id JOIN projects p ON p.id = w.project_id
     WHERE w.id = $1 AND e.id > w.last_event_id AND e.id <= $2 ORDER BY e.id LIMIT $3`, [webhookId, horizon, limit]);
  return rows.map((r) => ({
    id: r.id, project: r.project, objectKind: r.object_kind, objectId: r.object_id, objectName: r.object_name,
    reason: r.reason, message: r.message, createdAt: r.created_at,
  }));
}

/** Queues the events for the webhook (each once, whoever queues it) and moves its cursor to `readUpTo`. */
export async function queueDeliveries(tx: Queryable, webhookId: string, deliveries: { eventId: number; type: string; body: string }[], readUpTo: number, retryForMs: number): Promise<void> {
  if (deliveries.length > 0) {
    await tx.query(
      `INSERT INTO webhook_deliveries (id, webhook_id, event_id, type, body, give_up_at)
       SELECT d.id, $1, d.event_id, d.type, d.body, now() + $6 * interval '1 millisecond'
       FROM (SELECT unnest($2::text[]) AS id, unnest($3::int[]) AS event_id, unnest($4::text[]) AS type, unnest($5::text[]) AS body) d
       ON CONFLICT (webhook_id, event_id) DO NOTHING`,
      [webhookId, deliveries.map(() => randomUUID()), deliveries.map((d) => d.eventId), deliveries.map((d) => d.type), deliveries.map((d) => d.body), retryForMs]);
  }
  await tx.query('UPDATE webhooks SET last_event_id = greatest(last_event_id, $2) WHERE id = $1', [webhookId, readUpTo]);
}

export interface DueDelivery {
  id: string;
  webhookId: string;
  projectId: string;
  type: string;
  body: string;
  attempt: number;
  url: string;
  sealedSecret: string;
}

/** The secret that signs the webhook's deliveries; throws SecretUndecryptableError under another server's key. */
export function webhookSecret(box: SecretBox, delivery: Pick<DueDelivery, 'projectId' | 'webhookId' | 'sealedSecret'>): string {
  return box.open(delivery.projectId, sealedName(delivery.webhookId), delivery.sealedSecret);
}

/**
 * Claims up to `limit` due deliveries, with what sending them needs: per webhook, the oldest event due, and only while
 * none of its deliveries is being sent, so a receiver gets its events one at a time in order (a delivery waiting for a
 * retry holds back none), and one that hangs holds up only its own. A lease that ran out (a killed server) is taken over.
 */
export async function claimDueDeliveries(db: Queryable, owner: string, leaseMs: number, limit: number): Promise<DueDelivery[]> {
  const rows = await db.query(
    `WITH claimed AS (
       UPDATE webhook_deliveries SET lease_owner = $1, lease_expires_at = now() + $2 * interval '1 millisecond'
       WHERE id IN (
         SELECT id FROM webhook_deliveries WHERE id IN (
           SELECT DISTINCT ON (webhook_id) id FROM webhook_deliveries d
           WHERE status = 'pending' AND next_attempt_at <= now() AND (lease_owner IS NULL OR lease_expires_at < now())
             AND NOT EXISTS (SELECT 1 FROM webhook_deliveries sending WHERE sending.webhook_id = d.webhook_id
                               AND sending.status = 'pending' AND sending.lease_expires_at >= now())
           ORDER BY webhook_id, event_id)
         -- Checked again on the row as locked: another server may have claimed it since the choice above was read.
         AND status = 'pending' AND (lease_owner IS NULL OR lease_expires_at < now())
         ORDER BY next_attempt_at LIMIT $3 FOR UPDATE SKIP LOCKED)
       RETURNING *)
     SELECT c.id, c.webhook_id, c.type, c.body, c.attempts, w.url, w.project_id, w.sealed_secret
     FROM claimed c JOIN webhooks w ON w.id = c.webhook_id ORDER BY c.next_attempt_at`,
    [owner, leaseMs, limit]);
  return rows.map((r) => ({
    id: r.id, webhookId: r.webhook_id, projectId: r.project_id, type: r.type, body: r.body, attempt: r.attempts + 1, url: r.url, sealedSecret: r.sealed_secret,
  }));
}

export interface TryOutcome {
  at: Date;
  statusCode: number | null;
  latencyMs: number;
  error: string | null;
  /** Null once delivered; otherwise how long to wait before the next try. */
  retryInMs: number | null;
}

/**
 * Records a try of a delivery this server holds and gives the lease back: delivered on a 2xx, tried again after
 * `retryInMs` otherwise, or failed when that would fall past its day of tries. Nothing when the lease was lost.
 */
export async function recordTry(tx: Queryable, delivery: DueDelivery, owner: string, outcome: TryOutcome): Promise<void> {
  const held = await tx.query(
    `UPDATE webhook_deliveries SET
       attempts = $3,
       status = CASE WHEN $4::int IS NULL THEN 'delivered'
                     WHEN now() + $4::int * interval '1 millisecond' > give_up_at THEN 'failed' ELSE 'pending' END,
       next_attempt_at = now() + coalesce($4::int, 0) * interval '1 millisecond',
       lease_owner = NULL, lease_expires_at = NULL
     WHERE id = $1 AND lease_owner = $2 RETURNING id`,
    [delivery.id, owner, delivery.attempt, outcome.retryInMs]);
  if (held.length === 0) return;
  await tx.query(
    `INSERT INTO webhook_tries (delivery_id, attempt, at, status_code, latency_ms, error) VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (delivery_id, attempt) DO NOTHING`,
    [delivery.id, delivery.attempt, outcome.at, outcome.statusCode, outcome.latencyMs, outcome.error]);
}

/** The webhook's newest deliveries, newest first, each with its tries in order. */
export async function listDeliveries(db: Queryable, webhookId: string, limit: number): Promise<WebhookDelivery[]> {
  const deliveries = await db.query(
    'SELECT * FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY event_id DESC LIMIT $2', [webhookId, limit]);
  const tries = await db.query(
    'SELECT * FROM webhook_tries WHERE delivery_id = ANY($1::text[]) ORDER BY attempt', [deliveries.map((d) => d.id)]);
  const toTry = (t: Row): WebhookTry => ({ attempt: t.attempt, at: t.at.toISOString(), statusCode: t.status_code, latencyMs: t.latency_ms, error: t.error });
  return deliveries.map((d) => ({
    id: d.id, eventId: d.event_id, type: d.type, status: d.status, createdAt: d.created_at.toISOString(),
    nextAttemptAt: d.status === 'pending' ? d.next_attempt_at.toISOString() : null,
    tries: tries.filter((t) => t.delivery_id === d.id).map(toTry),
  }));
}

/** Deletes delivered and failed deliveries (with their tries) older than `keepMs`; pending ones stay until they end. */
export async function pruneDeliveries(db: Queryable, keepMs: number): Promise<void> {
  await db.query(`DELETE FROM webhook_deliveries WHERE status <> 'pending' AND created_at < now() - $1 * interval '1 millisecond'`, [keepMs]);
}
