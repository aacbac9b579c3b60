import type { CAC } from 'cac';
import { connect } from '../connect.js';
import { action } from '../errors.js';
import { addInclude, includeLine, isIncluded, refreshFromServer, sshConfigPath, userSshConfigPath } from '../ssh-config.js';
import { ensureKeyRegistered } from '../ssh-keys.js';

interface SshConfigFlags {
  include?: boolean;
}

export function registerSshConfig(cli: CAC): void {
  cli.command('ssh-config', 'Rewrite ~/.orchestrator/ssh/config with the project\'s running runs, so that "ssh <run>" reaches them')
    .option('--include', 'Also add its Include line at the top of ~/.ssh/config')
    .option('--project <name>', 'Project to use (default: the default project)')
    .example('orchestrator ssh-config --include')
    .action(action(async (flags: SshConfigFlags) => {
      const client = connect();
      await ensureKeyRegistered(client);
      const hosts = await refreshFromServer(client);
      process.stdout.write(hosts.length > 0 ? `${hosts.map((entry) => entry.host).join('\n')}\n` : '');
      process.stderr.write(`${sshConfigPath()}: ${hosts.length} ${hosts.length === 1 ? 'host' : 'hosts'} of project ${client.project}\n`);
      if (flags.include === true && !isIncluded()) {
        addInclude();
        process.stderr.write(`added "${includeLine()}" at the top of ${userSshConfigPath()}\n`);
      } else if (!isIncluded()) {
        process.stderr.write(`${userSshConfigPath()} does not include it; ssh -F ${sshConfigPath()} <run> reaches them (--include adds the Include)\n`);
      }
    }));
}
