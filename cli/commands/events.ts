import { setTimeout as sleep } from 'node:timers/promises';
import type { CAC } from 'cac';
import type { Event } from '../../api/objects.js';
import { optionText } from '../args.js';
import type { ApiClient } from '../client.js';
import { connect } from '../connect.js';
import { action } from '../errors.js';
import { formatTime, printJson } from '../format.js';
import { outputWidth, renderTable, truncate, WIDE_OPTION } from '../table.js';

interface EventsFlags {
  json?: boolean;
  follow?: boolean;
  wide?: boolean;
}

const POLL_MS = 1000;

function eventRow(event: Event): string[] {
  return [formatTime(event.createdAt), `${event.objectKind}/${event.objectName}`, event.reason, event.message];
}

async function fetchEvents(client: ApiClient, after: number, object: string | undefined): Promise<Event[]> {
  const query = new URLSearchParams({ after: String(after) });
  if (object !== undefined) query.set('object', object);
  return client.get<Event[]>(client.projectPath(`/events?${query}`));
}

export function registerEvents(cli: CAC): void {
  cli.command('events', 'Show what happened to fleets, instances and runs, oldest first')
    .option('--object <name>', 'Only events of this fleet, instance or run')
    .option('-f, --follow', 'Keep printing new events until Ctrl-C')
    .option('--json', 'Print JSON (one object per line with -f)')
    .option(...WIDE_OPTION)
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator events --object hello')
    .action(action(async (flags: EventsFlags) => {
      const client = connect();
      const object = optionText(['object']);
      const events = await fetchEvents(client, 0, object);
      const width = outputWidth(process.stdout, flags.wide === true);
      if (flags.follow !== true) {
        if (flags.json === true) printJson(events);
        else if (events.length === 0) process.stdout.write('no events\n');
        else process.stdout.write(renderTable(['time', 'object', 'reason', 'message'], events.map(eventRow), width));
        return 0;
      }
      return followEvents(client, events, object, flags.json === true, width);
    }));
}

async function followEvents(client: ApiClient, first: Event[], object: string | undefined, json: boolean, width: number): Promise<number> {
  const controller = new AbortController();
  const interrupt = () => controller.abort();
  process.on('SIGINT', interrupt);
  const line = ([time, name, reason, message]: string[]) => `${truncate(`${time}  ${name!.padEnd(24)}  ${reason!.padEnd(12)}  ${message}`, width)}\n`;
  const print = (event: Event) => process.stdout.write(json ? `${JSON.stringify(event)}\n` : line(eventRow(event)));
  if (!json) process.stdout.write(line(['TIME'.padEnd(formatTime(new Date().toISOString()).length), 'OBJECT', 'REASON', 'MESSAGE']));
  try {
    let after = 0;
    let batch = first;
    while (!controller.signal.aborted) {
      for (const event of batch) print(event);
      if (batch.length > 0) after = batch[batch.length - 1]!.id;
      await sleep(POLL_MS, undefined, { signal: controller.signal }).catch(() => undefined);
      if (controller.signal.aborted) break;
      batch = await fetchEvents(client, after, object);
    }
    return 0;
  } finally {
    process.off('SIGINT', interrupt);
  }
}
