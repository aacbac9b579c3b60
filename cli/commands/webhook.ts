import type { CAC } from 'cac';
import { SIGNATURE_HEADER, type CreatedWebhook, type Webhook, type WebhookDelivery } from '../../api/webhooks.js';
import { optionText } from '../args.js';
import type { ApiClient } from '../client.js';
import { connect } from '../connect.js';
import { action, CliError } from '../errors.js';
import { formatAge, formatTime, formatTimeLeft, printJson } from '../format.js';
import { renderTable } from '../table.js';

interface WebhookFlags {
  events?: string;
  json?: boolean;
}

const ACTIONS = ['add', 'list', 'delete', 'deliveries'];

export function registerWebhook(cli: CAC): void {
  cli.command('webhook [action] [target]', 'Manage the project\'s webhooks (admins): add URL --events ..., list, delete ID, deliveries ID')
    .option('--events <patterns>', 'add: event types, groups or *, separated by commas (run.failed,run.done,instance.*,budget.*)')
    .option('--json', 'print JSON')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator webhook add https://example.com/hooks/orchestrator --events run.failed,run.done,instance.*,budget.*')
    .example('orchestrator webhook deliveries 3f1c2a9e-...')
    .action(action(async (verb: string | undefined, target: string | undefined, flags: WebhookFlags) => {
      const client = connect();
      switch (verb ?? 'list') {
        case 'list': return listWebhooks(client, flags);
        case 'add': return addWebhook(client, required(verb!, 'URL', target), flags);
        case 'delete': return deleteWebhook(client, required(verb!, 'ID', target));
        case 'deliveries': return showDeliveries(client, required(verb!, 'ID', target), flags);
        default: throw new CliError(`unknown webhook action "${verb}"; use one of ${ACTIONS.join(', ')}`);
      }
    }));
}

function required(verb: string, what: string, value: string | undefined): string {
  if (value === undefined) throw new CliError(`give the webhook's ${what}: orchestrator webhook ${verb} ${what}`);
  return String(value);
}

const webhookPath = (client: ApiClient, id = '') => client.projectPath(`/webhooks${id ? `/${encodeURIComponent(id)}` : ''}`);

async function addWebhook(client: ApiClient, url: string, flags: WebhookFlags): Promise<void> {
  const patterns = optionText(['events']);
  if (patterns === undefined) throw new CliError('give the events to send: --events run.failed,run.done,instance.*,budget.* (or * for all)');
  const events = patterns.split(',').map((p) => p.trim()).filter((p) => p !== '');
  const hook = await client.post<CreatedWebhook>(webhookPath(client), { url, events });
  if (flags.json === true) {
    printJson(hook);
    return;
  }
  process.stdout.write(`id: ${hook.id}\nsecret: ${hook.secret}\n`);
  process.stderr.write(`webhook added to project ${client.project}: ${hook.url} gets ${hook.events.join(', ')}. `
    + `Keep the secret: it signs every delivery (${SIGNATURE_HEADER}) and is not shown again\n`);
}

async function listWebhooks(client: ApiClient, flags: WebhookFlags): Promise<void> {
  const hooks = await client.get<Webhook[]>(webhookPath(client));
  if (flags.json === true) {
    printJson(hooks);
    return;
  }
  if (hooks.length === 0) {
    process.stdout.write(`project ${client.project} has no webhooks; add one with orchestrator webhook add URL --events run.*\n`);
    return;
  }
  process.stdout.write(renderTable(['id', 'url', 'events', 'created'], hooks.map((h) => [h.id, h.url, h.events.join(','), formatAge(h.createdAt)])));
}

async function deleteWebhook(client: ApiClient, id: string): Promise<void> {
  await client.delete(webhookPath(client, id));
  process.stderr.write(`webhook ${id} deleted from project ${client.project}; its pending deliveries are dropped\n`);
}

/** `delivered`, `failed`, or `pending: next try in 40s`. */
function deliveryState(delivery: WebhookDelivery): string {
  return delivery.nextAttemptAt === null ? delivery.status : `pending: next try in ${formatTimeLeft(delivery.nextAttemptAt)}`;
}

async function showDeliveries(client: ApiClient, id: string, flags: WebhookFlags): Promise<void> {
  const deliveries = await client.get<WebhookDelivery[]>(`${webhookPath(client, id)}/deliveries`);
  if (flags.json === true) {
    printJson(deliveries);
    return;
  }
  if (deliveries.length === 0) {
    process.stdout.write(`webhook ${id} has no deliveries yet\n`);
    return;
  }
  const rows = deliveries.flatMap((d) => {
    const event = `${d.type} #${d.eventId}`;
    if (d.tries.length === 0) return [[event, '-', '-', '-', '-', deliveryState(d)]];
    return d.tries.map((t) => [
      event, String(t.attempt), formatTime(t.at), t.statusCode === null ? t.error ?? 'no answer' : String(t.statusCode), `${t.latencyMs}ms`,
      t.attempt === d.tries.length ? deliveryState(d) : '',
    ]);
  });
  process.stdout.write(renderTable(['event', 'try', 'at', 'status', 'latency', 'delivery'], rows));
}
