import type { Logger } from 'winston';
import { offerSatisfies, priceRefusal } from '../api/resources.js';
import { BackendError } from '../backends/backend.js';
import { CHANNELS } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { actingSpentBudget } from '../store/budgets.js';
import { recordEvent } from '../store/events.js';
import { forgetFleetCluster, provisionTargetReached, setFleetStatus, toFleet, type FleetRecord } from '../store/fleets.js';
import { insertInstance, listFleetInstances, makeFleetInstancesDue } from '../store/instances.js';
import type { BackendPool } from './backend-pool.js';
import { LeasedController } from './leased.js';
import { reconcileSshHosts } from './ssh-fleet-hosts.js';
import { forgetHostKeys } from '../store/ssh-host-keys.js';
import type { SshConfig } from '../api/ssh-fleet.js';

const FLEET_RECHECK_MS = 5000;

/** Brings a fleet applied with `nodes.target` to that many instances, keeps each fleet at `nodes.min` or more, and winds a deleted fleet down. */
export class FleetController extends LeasedController<FleetRecord> {
  readonly name = 'fleet';

  constructor(db: Db, owner: string, logger: Logger, private readonly pool: BackendPool) {
    super(db, owner, logger, { table: 'fleets', channel: CHANNELS.fleets, where: `status IN ('active', 'terminating')` });
  }

  protected toRecord(row: Row): FleetRecord {
    return toFleet(row);
  }

  protected async reconcile(fleet: FleetRecord): Promise<number> {
    const live = await listFleetInstances(this.db, fleet.id);
    if (fleet.status === 'terminating') {
      if (live.length === 0) {
        if (fleet.cluster && !(await this.deleteCluster(fleet))) return 1000;
        if (await setFleetStatus(this.db, fleet.id, this.owner, 'terminated', 'deleted')) {
          await forgetHostKeys(this.db, fleet.id, []);
          await this.event(fleet, 'Terminated', 'all instances terminated');
        }
        return 60_000;
      }
      await makeFleetInstancesDue(this.db, fleet.id);
      await this.db.notify(CHANNELS.instances);
      const busy = live.filter((i) => i.runId !== null).length;
      await setFleetStatus(this.db, fleet.id, this.owner, 'terminating', busy ? `waiting for ${busy} busy instance${busy === 1 ? '' : 's'} to finish` : 'terminating instances');
      return 1000;
    }
    const ssh = fleet.spec.ssh_config as SshConfig | undefined;
    if (ssh) {
      const message = await reconcileSshHosts(this.db, fleet, ssh);
      if (message !== fleet.statusMessage) await setFleetStatus(this.db, fleet.id, this.owner, 'active', message);
      return FLEET_RECHECK_MS;
    }
    const goal = fleet.provisionTarget !== null && fleet.provisionTarget > fleet.nodesMin
      ? { count: fleet.provisionTarget, text: `nodes.target=${fleet.provisionTarget}` }
      : { count: fleet.nodesMin, text: `nodes.min=${fleet.nodesMin}` };
    const missing = goal.count - live.filter((i) => i.status !== 'terminating').length;
    if (missing <= 0) {
      if (fleet.provisionTarget !== null) await provisionTargetReached(this.db, fleet.id, fleet.generation);
      if (fleet.statusMessage) await setFleetStatus(this.db, fleet.id, this.owner, 'active', '');
      return FLEET_RECHECK_MS;
    }
    const spent = await actingSpentBudget(this.db, fleet.projectId);
    if (spent) {
      await setFleetStatus(this.db, fleet.id, this.owner, 'active', `cannot reach ${goal.text}: ${spent.reason}`);
      return FLEET_RECHECK_MS;
    }
    const listing = await this.pool.offers(fleet.projectId, fleet.backends);
    const offer = listing.offers.find((o) => o.availability === 'available' && offerSatisfies(o, fleet.requirement));
    if (!offer) {
      const why = listing.errors.length ? listing.errors.join('; ')
        : priceRefusal(fleet.requirement, listing.offers) ?? `no available offer matches the fleet's resources`;
      await setFleetStatus(this.db, fleet.id, this.owner, 'active', `cannot reach ${goal.text}: ${why}`);
      return FLEET_RECHECK_MS;
    }
    for (let n = 0; n < missing; n++) {
      const instance = await insertInstance(this.db, {
        projectId: fleet.projectId, fleetId: fleet.id, fleetName: fleet.name, backend: offer.backend, requirement: fleet.requirement, runId: null,
      });
      await recordEvent(this.db, { projectId: fleet.projectId, objectKind: 'instance', objectId: instance.id, objectName: instance.name, reason: 'Created', message: `created to ${goal.count === fleet.nodesMin ? `keep fleet ${fleet.name} at` : `bring fleet ${fleet.name} to`} ${goal.text}` });
    }
    if (fleet.provisionTarget !== null) await provisionTargetReached(this.db, fleet.id, fleet.generation);
    await this.db.notify(CHANNELS.instances);
    return FLEET_RECHECK_MS;
  }

  /**
   * A deleted cluster fleet's cluster goes once its last instance has; false while the cloud still counts an
   * instance in it (one shutting down), as it refuses to delete a cluster that holds any.
   */
  private async deleteCluster(fleet: FleetRecord): Promise<boolean> {
    const { backend: type, id } = fleet.cluster!;
    const backend = await this.pool.backend(fleet.projectId, type);
    try {
      await backend?.deleteCluster?.(id);
    } catch (error) {
      if (!(error instanceof BackendError)) throw error;
      await setFleetStatus(this.db, fleet.id, this.owner, 'terminating', `deleting cluster ${id}: ${error.message}`);
      return false;
    }
    await forgetFleetCluster(this.db, fleet.id);
    await this.event(fleet, 'ClusterDeleted', `cluster ${id} deleted`);
    return true;
  }

  private event(fleet: FleetRecord, reason: string, message: string): Promise<void> {
    return recordEvent(this.db, { projectId: fleet.projectId, objectKind: 'fleet', objectId: fleet.id, objectName: fleet.name, reason, message });
  }
}
