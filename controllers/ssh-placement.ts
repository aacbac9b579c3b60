import { describeRequirement, offerSatisfies, type ResourceRequirement } from '../api/resources.js';
import { sshHosts, type SshConfig } from '../api/ssh-fleet.js';
import type { FleetRecord } from '../store/fleets.js';
import type { InstanceRecord } from '../store/instances.js';

/**
 * Why a run that found no free host in an SSH fleet waits or fails there: an SSH fleet never provisions, so
 * it is the hosts it has. `fail` when none of them has what the run needs (as known once each host was reached).
 */
export function sshFleetShortfall(fleet: FleetRecord, hosts: readonly InstanceRecord[], requirement: ResourceRequirement): { fail: boolean; reason: string } {
  const fitting = hosts.filter((i) => i.offer && offerSatisfies(i.offer, requirement));
  if (fitting.length > 0) {
    const busy = fitting.filter((i) => i.runId !== null).length;
    return { fail: false, reason: `${busy} of the ${fitting.length} hosts of SSH fleet ${fleet.name} that fit ${describeRequirement(requirement)} ${busy === 1 ? 'is' : 'are'} busy` };
  }
  const unknown = hosts.filter((i) => !i.offer).length;
  if (unknown > 0) return { fail: false, reason: `${unknown} host${unknown === 1 ? '' : 's'} of SSH fleet ${fleet.name} not reached yet` };
  return { fail: true, reason: `no offers: no host of SSH fleet ${fleet.name} has ${describeRequirement(requirement)}` };
}

/** A host removed from its fleet's ssh_config is draining: it finishes its run and takes no other. */
export function isDraining(fleet: FleetRecord, instance: InstanceRecord): boolean {
  if (!instance.sshHost) return false;
  return !sshHosts(fleet.spec.ssh_config as SshConfig).some((host) => host.name === instance.sshHost!.name);
}
