import { sshHosts, type SshConfig } from './ssh-fleet.js';
import type { IssueAt, Path } from './validate.js';

type Report = (path: Path, message: string, at: IssueAt) => void;

/** What an SSH fleet's hosts decide by themselves, so that the fleet may not say it too. */
const DECIDED_BY_HOSTS: Record<string, string> = {
  nodes: 'an SSH fleet\'s instances are its hosts, one each; list them under ssh_config.hosts',
  backends: 'an SSH fleet\'s instances are its own hosts, not a backend\'s',
  resources: 'an SSH fleet\'s resources are what its hosts have (detected over SSH)',
  idle_duration: 'the hosts of an SSH fleet stay in it until they are removed from ssh_config',
};

/** A fleet either provisions `nodes` from backends or is made of `ssh_config.hosts`, never both. */
export function checkFleet(spec: Record<string, unknown>, report: Report): void {
  const ssh = spec.ssh_config as SshConfig | undefined;
  if (ssh === undefined) {
    if (spec.nodes === undefined) report(['nodes'], 'required field is missing; a fleet needs nodes (such as 1 or 0..2), or ssh_config with its hosts', 'parent');
    return;
  }
  for (const [field, why] of Object.entries(DECIDED_BY_HOSTS)) {
    if (spec[field] !== undefined) report([field], `cannot be combined with ssh_config: ${why}`, 'key');
  }
  if (!Array.isArray(ssh?.hosts) || ssh.hosts.some((h) => typeof h !== 'string' && (typeof h !== 'object' || h === null || typeof h.hostname !== 'string'))) return;
  const seen = new Set<string>();
  sshHosts(ssh).forEach((host, index) => {
    if (seen.has(host.name)) report(['ssh_config', 'hosts', index], `${host.name} is listed twice`, 'value');
    seen.add(host.name);
    const blocks = ssh.hosts[index];
    if (typeof blocks === 'object' && blocks.blocks !== undefined && blocks.blocks !== 1) {
      report(['ssh_config', 'hosts', index, 'blocks'], 'blocks are not supported: a run takes a whole host, never a share of its GPUs', 'key');
    }
  });
}
