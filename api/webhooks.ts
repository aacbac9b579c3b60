import { Type, type Static } from '@sinclair/typebox';

/** The header of each delivery that signs it: `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. */
export const SIGNATURE_HEADER = 'X-Orchestrator-Signature';

/**
 * The webhook event types, each from the events (`orchestrator events`) of one kind of object with one reason.
 * A service's replica and a multi-node task's node speak under their own reasons (ReplicaFailed, NodeRunning),
 * so only the run as a whole gives run.* events.
 */
const TYPES_BY_OBJECT_AND_REASON = {
  run: {
    Submitted: 'run.submitted', Provisioning: 'run.provisioning', Running: 'run.running', Retrying: 'run.retrying',
    Done: 'run.done', Failed: 'run.failed', Terminated: 'run.stopped',
  },
  instance: { Created: 'instance.created', Provisioning: 'instance.provisioning', Ready: 'instance.ready', Terminated: 'instance.terminated' },
  project: { BudgetAlert: 'budget.alert', BudgetExceeded: 'budget.exceeded' },
} as const satisfies Record<string, Record<string, string>>;

type ObjectKind = keyof typeof TYPES_BY_OBJECT_AND_REASON;
export type WebhookEventType = { [K in ObjectKind]: (typeof TYPES_BY_OBJECT_AND_REASON)[K][keyof (typeof TYPES_BY_OBJECT_AND_REASON)[K]] }[ObjectKind];

export const WEBHOOK_EVENT_TYPES: readonly WebhookEventType[] = Object.values(TYPES_BY_OBJECT_AND_REASON).flatMap((byReason) => Object.values(byReason));

/** The webhook event an event of `objectKind` with `reason` is, or null for events no webhook receives. */
export function webhookEventType(objectKind: string, reason: string): WebhookEventType | null {
  const byReason = (TYPES_BY_OBJECT_AND_REASON as Record<string, Record<string, WebhookEventType>>)[objectKind];
  return byReason && Object.hasOwn(byReason, reason) ? byReason[reason]! : null;
}

const GROUPS = [...new Set(WEBHOOK_EVENT_TYPES.map((type) => type.split('.')[0]!))];

/** Why `pattern` names no event type (an exact type such as run.failed, a group such as instance.*, or *), or null. */
export function eventPatternProblem(pattern: string): string | null {
  if (pattern === '*' || WEBHOOK_EVENT_TYPES.includes(pattern as WebhookEventType)) return null;
  if (pattern.endsWith('.*') && GROUPS.includes(pattern.slice(0, -2))) return null;
  return `unknown event pattern "${pattern}"; use an event type (${WEBHOOK_EVENT_TYPES.join(', ')}), a group (${GROUPS.map((g) => `${g}.*`).join(', ')}) or *`;
}

export function matchesEventPatterns(type: WebhookEventType, patterns: readonly string[]): boolean {
  return patterns.some((pattern) => pattern === '*' || pattern === type || (pattern.endsWith('.*') && type.startsWith(pattern.slice(0, -1))));
}

const Timestamp = Type.String({ description: 'ISO 8601' });

/** `POST /api/projects/:project/webhooks`. */
export const WebhookRequest = Type.Object({
  url: Type.String({ description: 'http:// or https:// URL that receives a POST per event' }),
  events: Type.Array(Type.String(), { minItems: 1, description: 'Event types (run.failed), groups (instance.*) or *' }),
}, { additionalProperties: false });
export type WebhookRequest = Static<typeof WebhookRequest>;

/** A webhook as lists show it: never its secret. */
export const Webhook = Type.Object({
  id: Type.String(),
  url: Type.String(),
  events: Type.Array(Type.String()),
  createdAt: Timestamp,
});
export type Webhook = Static<typeof Webhook>;

/** The answer to creating a webhook: the only time its signing secret is shown. */
export const CreatedWebhook = Type.Composite([Webhook, Type.Object({ secret: Type.String({ description: 'Signs every delivery (HMAC-SHA256); shown once' }) })]);
export type CreatedWebhook = Static<typeof CreatedWebhook>;

/** One POST of a delivery: what the receiver answered, or why it did not. */
export const WebhookTry = Type.Object({
  attempt: Type.Integer({ minimum: 1 }),
  at: Timestamp,
  statusCode: Type.Union([Type.Integer(), Type.Null()], { description: 'null: no answer (refused, timed out)' }),
  latencyMs: Type.Integer({ minimum: 0 }),
  error: Type.Union([Type.String(), Type.Null()]),
});
export type WebhookTry = Static<typeof WebhookTry>;

/** One event on its way to one webhook: `pending` until a 2xx answer (`delivered`) or a day of tries (`failed`). */
export const WebhookDelivery = Type.Object({
  id: Type.String(),
  eventId: Type.Integer(),
  type: Type.String(),
  status: Type.Union([Type.Literal('pending'), Type.Literal('delivered'), Type.Literal('failed')]),
  createdAt: Timestamp,
  nextAttemptAt: Type.Union([Timestamp, Type.Null()], { description: 'When a pending delivery is tried next' }),
  tries: Type.Array(WebhookTry),
});
export type WebhookDelivery = Static<typeof WebhookDelivery>;

/** The JSON body of every delivery. `id` is the event's, the same in every try and for every webhook. */
export const WebhookPayload = Type.Object({
  id: Type.String(),
  type: Type.String(),
  project: Type.String(),
  object: Type.Object({ kind: Type.String(), id: Type.String(), name: Type.String() }),
  reason: Type.String(),
  message: Type.String(),
  createdAt: Timestamp,
});
export type WebhookPayload = Static<typeof WebhookPayload>;
