import type { CAC } from 'cac';
import { Value } from '@sinclair/typebox/value';
import { ApiError } from '../../api/objects.js';
import { optionText } from '../args.js';
import { ApiClient } from '../client.js';
import { loadConfig, selectProject } from '../config.js';
import { action, CliError } from '../errors.js';
import { runPath } from '../follow.js';
import { replicaFlag } from './logs.js';

/** What ssh itself exits with when the connection fails: a refused proxy reads the same to scripts around ssh. */
const SSH_FAILED = 255;

interface SshProxyFlags {
  replica?: string | number;
}

export function registerSshProxy(cli: CAC): void {
  cli.command('ssh-proxy <run>', 'Carry one SSH connection to a run over stdin and stdout (the ProxyCommand that ~/.orchestrator/ssh/config names)')
    .option('--replica <n>', 'For a service: which replica (default: the lowest-numbered ready one)')
    .option('--project <name>', 'Project to use (default: the default project)')
    .action(action(async (name: string, flags: SshProxyFlags) => {
      try {
        return await proxy(String(name), replicaFlag(flags.replica));
      } catch (error) {
        if (error instanceof CliError) throw new CliError(error.message, SSH_FAILED);
        throw error;
      }
    }));
}

async function proxy(run: string, replica: number | undefined): Promise<number> {
  const settings = selectProject(loadConfig(), optionText(['project']));
  const client = new ApiClient(settings);
  const url = new URL(`${client.url}${runPath(client, run, '/ssh')}${replica === undefined ? '' : `?replica=${replica}`}`);
  url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
  const { createWebSocketStream, WebSocket } = await import('ws');
  const socket = new WebSocket(url, { headers: { authorization: `Bearer ${settings.token}` }, perMessageDeflate: false });
  // Made before the open: the agent speaks first, and its banner may come with the upgrade's answer, before any later listener.
  const tunnel = createWebSocketStream(socket);
  tunnel.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    socket.once('open', resolve);
    socket.once('unexpected-response', (_request, response) => {
      const chunks: Buffer[] = [];
      response.on('data', (chunk: Buffer) => chunks.push(chunk)).on('end', () => reject(refusal(client, response.statusCode ?? 0, Buffer.concat(chunks).toString('utf8'))));
    });
    socket.once('error', (error) => reject(new CliError(`cannot reach the server at ${client.url}: ${error.message}`)));
  });
  process.stdin.pipe(tunnel);
  tunnel.pipe(process.stdout, { end: false });
  // ssh closing its end (it was killed, or it is done) ends the connection; there is no one left to tell.
  await new Promise((resolve) => {
    socket.once('close', resolve);
    process.stdout.once('error', () => {
      socket.terminate();
      resolve(undefined);
    });
  });
  return 0;
}

function refusal(client: ApiClient, status: number, body: string): CliError {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    parsed = undefined;
  }
  const message = Value.Check(ApiError, parsed) ? parsed.error.message : `the server answered ${status}`;
  if (status === 401) return new CliError(`the server at ${client.url} refused the token of project ${client.project} (${message})`);
  return new CliError(message);
}
