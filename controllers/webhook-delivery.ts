import { createHmac } from 'node:crypto';
import type { Logger } from 'winston';
import { matchesEventPatterns, SIGNATURE_HEADER, webhookEventType, type WebhookPayload } from '../api/webhooks.js';
import { CHANNELS } from '../store/channels.js';
import type { Db } from '../store/db.js';
import type { SecretBox } from '../store/secrets.js';
import {
  claimDueDeliveries, eventsForWebhook, lockWebhooksBehind, pruneDeliveries, queueDeliveries, recordTry, settledEventHorizon, webhookSecret,
  type DueDelivery, type ProjectEvent,
} from '../store/webhooks.js';
import type { Controller } from './manager.js';

export interface WebhookTimings {
  /** How long one POST may take before it counts as failed. */
  timeoutMs: number;
  /** The wait before the second try; each later wait doubles, up to `maxRetryMs`. */
  firstRetryMs: number;
  maxRetryMs: number;
  /** How long after an event its delivery is still tried. */
  retryForMs: number;
  /** How old the event after a gap in event ids must be before the gap is passed over (see settledEventHorizon). */
  settleMs: number;
}

export const DEFAULT_WEBHOOK_TIMINGS: WebhookTimings = {
  timeoutMs: 10_000, firstRetryMs: 10_000, maxRetryMs: 60 * 60_000, retryForMs: 24 * 60 * 60_000, settleMs: 5_000,
};

/** Deliveries in flight at once per server: a receiver that hangs holds one of them for `timeoutMs` at most. */
const CONCURRENCY = 16;
const EVENTS_PER_WEBHOOK_PASS = 500;
/** How long the delivery log keeps a delivery that has ended, and how often it is trimmed. */
const DELIVERIES_KEPT_MS = 7 * 24 * 60 * 60_000;
const PRUNE_EVERY_MS = 60 * 60_000;

/** `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`, as docs/costs.md shows receivers how to check. */
export function signDelivery(secret: string, unixSeconds: number, body: string): string {
  return `t=${unixSeconds},v1=${createHmac('sha256', secret).update(`${unixSeconds}.${body}`).digest('hex')}`;
}

function payloadOf(event: ProjectEvent, type: string): WebhookPayload {
  return {
    id: String(event.id), type, project: event.project,
    object: { kind: event.objectKind, id: event.objectId, name: event.objectName },
    reason: event.reason, message: event.message, createdAt: event.createdAt.toISOString(),
  };
}

function failureOf(error: unknown, timeoutMs: number): string {
  const e = error as Error & { cause?: { code?: string; message?: string } };
  if (e.name === 'TimeoutError') return `no answer within ${timeoutMs / 1000}s`;
  if (e.name === 'AbortError') return 'the server stopped before an answer';
  return e.cause?.code ?? e.cause?.message ?? e.message;
}

/**
 * Webhooks as an outbox: each pass reads the events every webhook has not read yet (a cursor over event ids) into
 * `webhook_deliveries`, then claims due deliveries under a lease and POSTs them without waiting for the answers, so a
 * receiver that is down or hangs slows no controller and not even this loop. Deliveries are rows, so a restarted
 * server (or another one) carries on with them; a lease keeps two servers from sending one at once.
 */
export class WebhookDeliveryController implements Controller {
  readonly name = 'webhook-delivery';
  readonly channel = CHANNELS.webhooks;
  private readonly inFlight = new Set<Promise<void>>();
  private wake: () => void = () => {};
  private prunedAt = 0;
  /** Aborted when the server stops, so that a receiver that hangs does not hold the shutdown for its timeout. */
  private readonly stopping = new AbortController();

  constructor(
    private readonly db: Db,
    private readonly owner: string,
    private readonly logger: Logger,
    private readonly secrets: SecretBox,
    private readonly version: string,
    private readonly timings: WebhookTimings = DEFAULT_WEBHOOK_TIMINGS,
  ) {}

  setWake(wake: () => void): void {
    this.wake = wake;
  }

  async pass(): Promise<void> {
    if (Date.now() - this.prunedAt > PRUNE_EVERY_MS) {
      await pruneDeliveries(this.db, DELIVERIES_KEPT_MS);
      this.prunedAt = Date.now();
    }
    await this.queueNewEvents();
    const room = CONCURRENCY - this.inFlight.size;
    if (room <= 0) return;
    const due = await claimDueDeliveries(this.db, this.owner, this.timings.timeoutMs + 5_000, room);
    for (const delivery of due) {
      const sending: Promise<void> = this.send(delivery)
        .catch((error: unknown) => { this.logger.error(`webhook delivery ${delivery.id}: ${(error as Error).stack ?? error}`); })
        .finally(() => {
          this.inFlight.delete(sending);
          this.wake();
        });
      this.inFlight.add(sending);
    }
  }

  async settle(): Promise<void> {
    this.stopping.abort();
    await Promise.all([...this.inFlight]);
  }

  private async queueNewEvents(): Promise<void> {
    const horizon = await settledEventHorizon(this.db, this.timings.settleMs);
    if (horizon === 0) return;
    await this.db.transaction(async (tx) => {
      for (const hook of await lockWebhooksBehind(tx, horizon)) {
        const events = await eventsForWebhook(tx, hook.id, horizon, EVENTS_PER_WEBHOOK_PASS);
        const deliveries = events.flatMap((event) => {
          const type = webhookEventType(event.objectKind, event.reason);
          return type && matchesEventPatterns(type, hook.events) ? [{ eventId: event.id, type, body: JSON.stringify(payloadOf(event, type)) }] : [];
        });
        const readUpTo = events.length === EVENTS_PER_WEBHOOK_PASS ? events.at(-1)!.id : horizon;
        await queueDeliveries(tx, hook.id, deliveries, readUpTo, this.timings.retryForMs);
      }
    });
  }

  private async send(delivery: DueDelivery): Promise<void> {
    const at = new Date();
    let statusCode: number | null = null;
    let error: string | null = null;
    try {
      const signature = signDelivery(webhookSecret(this.secrets, delivery), Math.floor(at.getTime() / 1000), delivery.body);
      const response = await fetch(delivery.url, {
        method: 'POST', body: delivery.body, redirect: 'manual',
        signal: AbortSignal.any([AbortSignal.timeout(this.timings.timeoutMs), this.stopping.signal]),
        headers: {
          'content-type': 'application/json', 'user-agent': `orchestrator/${this.version}`, [SIGNATURE_HEADER]: signature,
          'x-orchestrator-event': delivery.type, 'x-orchestrator-delivery': delivery.id,
        },
      });
      statusCode = response.status;
      await response.body?.cancel();
    } catch (failure) {
      error = failureOf(failure, this.timings.timeoutMs);
    }
    const latencyMs = Date.now() - at.getTime();
    const delivered = statusCode !== null && statusCode >= 200 && statusCode < 300;
    const retryInMs = delivered ? null : Math.min(this.timings.maxRetryMs, this.timings.firstRetryMs * 2 ** (delivery.attempt - 1));
    await this.db.transaction((tx) => recordTry(tx, delivery, this.owner, { at, statusCode, latencyMs, error, retryInMs }));
  }
}
