import { sshFleetAddresses, sshHosts, type SshConfig } from '../api/ssh-fleet.js';
import { CHANNELS } from '../store/channels.js';
import type { Db } from '../store/db.js';
import { recordEvent } from '../store/events.js';
import type { FleetRecord } from '../store/fleets.js';
import { insertInstance } from '../store/instances.js';
import { forgetHostKeys } from '../store/ssh-host-keys.js';
import { latestHostInstances, stopRemovedHost } from '../store/ssh-hosts.js';

/**
 * Failures that trying again cannot mend by itself (a refused key, no sudo, a changed host key, an agent removed by
 * hand): the host waits until the fleet is applied again. A host that was unreachable (a reboot) is tried at once.
 */
const WAITS_FOR_APPLY = ['provisioning_failed', 'provisioning_timeout', 'terminated_by_backend'];

/**
 * Keeps one instance on each host of an SSH fleet: a host added gets one (its agent is installed), a host removed
 * is stopped once idle (its agent uninstalled) and its host key forgotten. A host whose install failed is tried
 * again when the fleet is applied again. Returns a status message for the fleet: which hosts failed.
 */
export async function reconcileSshHosts(db: Db, fleet: FleetRecord, ssh: SshConfig): Promise<string> {
  const hosts = sshHosts(ssh);
  const latest = await latestHostInstances(db, fleet.id);
  let created = false;
  for (const instance of latest) {
    if (instance.status === 'terminated' || hosts.some((host) => host.name === instance.sshHost!.name)) continue;
    if (await stopRemovedHost(db, instance.id, `${instance.sshHost!.name} was removed from fleet ${fleet.name}`)) {
      await recordEvent(db, { projectId: fleet.projectId, objectKind: 'instance', objectId: instance.id, objectName: instance.name, reason: 'Terminating', message: `removed_from_fleet: ${instance.sshHost!.name} is no longer in ssh_config` });
      created = true;
    }
  }
  // Again here, not only at apply: removing a host connects to it to uninstall its agent, which records its key anew.
  await forgetHostKeys(db, fleet.id, sshFleetAddresses(ssh));
  const failed: string[] = [];
  for (const host of hosts) {
    const last = latest.find((instance) => instance.sshHost!.name === host.name);
    if (last && last.status !== 'terminated') continue;
    if (last && WAITS_FOR_APPLY.includes(last.terminationReason ?? '') && last.terminatedAt! > fleet.appliedAt) {
      failed.push(host.name);
      continue;
    }
    const instance = await insertInstance(db, { projectId: fleet.projectId, fleetId: fleet.id, fleetName: fleet.name, backend: 'ssh', requirement: fleet.requirement, runId: null, sshHost: host });
    await recordEvent(db, { projectId: fleet.projectId, objectKind: 'instance', objectId: instance.id, objectName: instance.name, reason: 'Created', message: `host ${host.name} of fleet ${fleet.name}` });
    created = true;
  }
  if (created) await db.notify(CHANNELS.instances);
  if (failed.length === 0) return '';
  return `${failed.length} of ${hosts.length} hosts failed (${failed.join(', ')}); orchestrator fleet shows why, and apply tries them again`;
}
