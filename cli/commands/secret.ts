import type { CAC } from 'cac';
import { readFileSync } from 'node:fs';
import { text as readStream } from 'node:stream/consumers';
import { SECRET_NAME_PATTERN, SECRET_NAME_RULE } from '../../api/interpolation.js';
import type { SecretInfo, SecretWithValue } from '../../api/secrets.js';
import type { ApiClient } from '../client.js';
import { connect } from '../connect.js';
import { action, CliError } from '../errors.js';
import { formatAge, printJson } from '../format.js';
import { optionText } from '../args.js';
import { renderTable } from '../table.js';

interface SecretFlags {
  fromFile?: string;
  json?: boolean;
}

const ACTIONS = ['set', 'get', 'list', 'delete'];

export function registerSecret(cli: CAC): void {
  cli.command('secret [action] [name] [value]', 'Manage the project\'s secrets, which runs use as ${{ secrets.NAME }}: set, get, list, delete')
    .option('--from-file <path>', 'set: read the value from this file, as it is')
    .option('--json', 'list: print JSON')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator secret set HF_TOKEN --from-file ~/.cache/huggingface/token')
    .example('printf %s "$TOKEN" | orchestrator secret set HF_TOKEN')
    .example('orchestrator secret list')
    .action(action(async (verb: string | undefined, name: string | undefined, value: string | undefined, flags: SecretFlags) => {
      const client = connect();
      switch (verb ?? 'list') {
        case 'list': return listSecrets(client, flags);
        case 'set': return setSecret(client, secretName(verb!, name), value === undefined ? undefined : String(value));
        case 'get': return getSecret(client, secretName(verb!, name));
        case 'delete': return deleteSecret(client, secretName(verb!, name));
        default: throw new CliError(`unknown secret action "${verb}"; use one of ${ACTIONS.join(', ')}`);
      }
    }));
}

function secretName(verb: string, name: string | undefined): string {
  if (name === undefined) throw new CliError(`give the secret's name: orchestrator secret ${verb} NAME`);
  const text = String(name);
  if (!new RegExp(SECRET_NAME_PATTERN).test(text)) throw new CliError(`"${text}" is not a valid secret name; use ${SECRET_NAME_RULE}`);
  return text;
}

const secretPath = (client: ApiClient, name: string) => client.projectPath(`/secrets/${encodeURIComponent(name)}`);

/** The value from the command line, from --from-file (as it is), or from stdin (one trailing newline dropped, as `echo` adds one). */
async function valueToSet(given: string | undefined): Promise<string> {
  const file = optionText(['from-file']);
  if (given !== undefined && file !== undefined) throw new CliError('give the value once: on the command line or with --from-file, not both');
  if (given !== undefined) return given;
  if (file !== undefined) {
    let bytes: Buffer;
    try {
      bytes = readFileSync(file);
    } catch (error) {
      throw new CliError(`${file}: cannot read it: ${(error as Error).message}`);
    }
    const text = bytes.toString('utf8');
    if (!Buffer.from(text, 'utf8').equals(bytes)) throw new CliError(`${file}: not UTF-8 text; a secret is text (base64 a binary file first)`);
    return text;
  }
  if (process.stdin.isTTY) {
    throw new CliError('give the value: orchestrator secret set NAME VALUE, --from-file FILE, or on stdin (printf %s "$VALUE" | orchestrator secret set NAME)');
  }
  return (await readStream(process.stdin)).replace(/\r?\n$/, '');
}

async function setSecret(client: ApiClient, name: string, given: string | undefined): Promise<void> {
  const value = await valueToSet(given);
  if (value === '') throw new CliError('the value is empty; a secret needs a value');
  const secret = await client.request<SecretInfo>('PUT', secretPath(client, name), { value });
  // A new secret's two dates are the same moment; an update moves updatedAt on.
  const updated = secret.updatedAt !== secret.createdAt;
  process.stderr.write(`secret ${name} ${updated ? 'updated' : 'set'} in project ${client.project}; runs use it as \${{ secrets.${name} }}\n`);
}

async function getSecret(client: ApiClient, name: string): Promise<void> {
  const secret = await client.get<SecretWithValue>(secretPath(client, name));
  process.stdout.write(`${secret.value}\n`);
}

async function listSecrets(client: ApiClient, flags: SecretFlags): Promise<void> {
  const secrets = await client.get<SecretInfo[]>(client.projectPath('/secrets'));
  if (flags.json === true) {
    printJson(secrets);
    return;
  }
  if (secrets.length === 0) {
    process.stdout.write(`project ${client.project} has no secrets; set one with orchestrator secret set NAME\n`);
    return;
  }
  process.stdout.write(renderTable(['name', 'created', 'updated'], secrets.map((s) => [s.name, formatAge(s.createdAt), formatAge(s.updatedAt)])));
}

async function deleteSecret(client: ApiClient, name: string): Promise<void> {
  await client.delete(secretPath(client, name));
  process.stderr.write(`secret ${name} deleted from project ${client.project}\n`);
}
