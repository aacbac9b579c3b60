import { spawn } from 'node:child_process';
import type { CAC } from 'cac';
import type { Run } from '../../api/objects.js';
import { connect, projectFlag } from '../connect.js';
import { action, CliError } from '../errors.js';
import { runPath } from '../follow.js';
import { refreshFromServer, sshConfigPath } from '../ssh-config.js';
import { ensureKeyRegistered } from '../ssh-keys.js';
import { replicaFlag } from './logs.js';

interface SshFlags {
  replica?: string | number;
  '--'?: string[];
}

export function registerSsh(cli: CAC): void {
  cli.command('ssh <run> [...command]', 'Open a shell in a running run, or run a command there, with OpenSSH (plain "ssh <run>" works too once apply added the Include)')
    .option('--replica <n>', 'For a service: which replica (default: the lowest-numbered ready one)')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator ssh dev')
    .example('orchestrator ssh train -- nvidia-smi -L')
    .action(action(async (name: string, words: string[], flags: SshFlags) => {
      const client = connect();
      const run = String(name);
      const replica = replicaFlag(flags.replica);
      await ensureKeyRegistered(client);
      const hosts = await refreshFromServer(client);
      const host = replica === undefined ? run : `${run}-${replica}`;
      if (!hosts.some((entry) => entry.host === host)) {
        const view = await client.get<Run>(runPath(client, run));
        const what = replica === undefined ? `run ${run}` : `replica ${replica} of ${run}`;
        throw new CliError(view.status === 'running'
          ? `${what} cannot be reached over SSH yet: its instance's agent gave no host key (an agent older than SSH support?)`
          : `run ${run} is ${view.status}; ssh reaches a run only while it runs (orchestrator ps${projectFlag()} shows it)`);
      }
      return sshInto(host, [...words.map(String), ...(flags['--'] ?? [])]);
    }));
}

/** Runs the real ssh with our config alone, the terminal handed over to it; its exit code is ours. */
function sshInto(host: string, command: string[]): Promise<number> {
  const child = spawn('ssh', ['-F', sshConfigPath(), host, ...command], { stdio: 'inherit' });
  const ignore = () => undefined;
  process.on('SIGINT', ignore);
  return new Promise((resolve, reject) => {
    child.once('error', (error: NodeJS.ErrnoException) => reject(error.code === 'ENOENT'
      ? new CliError('ssh is not installed; install the OpenSSH client (e.g. apt install openssh-client)')
      : error));
    child.once('close', (code, signal) => {
      process.off('SIGINT', ignore);
      resolve(code ?? (signal ? 128 + 2 : 1));
    });
  });
}
