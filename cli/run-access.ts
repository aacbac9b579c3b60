import { spawnSync } from 'node:child_process';
import { ideLink, ideOf } from '../api/ide.js';
import type { Run } from '../api/objects.js';
import type { ApiClient } from './client.js';
import { isFinished, runPath } from './follow.js';
import { choosePorts, describeForwards, PortForwarder, type PortRequest } from './port-forwarding.js';
import { isIncluded, refreshFromServer, sshConfigPath } from './ssh-config.js';

/** The job's working directory, as a shell in it says: it depends on the runtime and the agent's folders. */
function workingDirectory(host: string): string | null {
  const result = spawnSync('ssh', ['-F', sshConfigPath(), '-o', 'BatchMode=yes', host, 'pwd'], { encoding: 'utf8', timeout: 30_000 });
  return result.status === 0 ? result.stdout.trim() : null;
}

/**
 * Refreshes the run's entry in ~/.orchestrator/ssh/config and returns the lines that say how to reach it: the IDE
 * link of a dev environment with an `ide`, and the ssh command; none when the run cannot be reached over SSH.
 */
export async function accessLines(client: ApiClient, run: Pick<Run, 'name' | 'kind' | 'spec'>): Promise<string[]> {
  const hosts = await refreshFromServer(client);
  if (!hosts.some((entry) => entry.host === run.name)) return [];
  const lines: string[] = [];
  const ide = ideOf(run);
  const directory = ide ? workingDirectory(run.name) : null;
  if (ide && directory) lines.push(`${`To open in ${ide.name}:`.padEnd(27)} ${ideLink(ide, run.name, directory)}`);
  lines.push(`To connect via SSH:         ${isIncluded() ? `ssh ${run.name}` : `ssh -F ${sshConfigPath()} ${run.name}`}`);
  return lines;
}

/** Whether the run is over, as the server says now. */
export async function runEnded(client: ApiClient, name: string): Promise<boolean> {
  return isFinished(await client.get<Run>(runPath(client, name)));
}

/**
 * Forwards the requested ports of the run to localhost over one ssh connection, held (and remade when it drops)
 * until stopped or the run ends. A busy explicit local port throws before anything connects.
 */
export async function startForwarding(client: ApiClient, name: string, requests: readonly PortRequest[], say: (text: string) => void): Promise<PortForwarder> {
  const forwards = await choosePorts(requests);
  return new PortForwarder(name, forwards, () => runEnded(client, name), (ready) => {
    if (ready.length > 0) say(describeForwards(ready));
  });
}
