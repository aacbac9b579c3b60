import type { FleetPlan } from '../api/objects.js';
import { describeRequirement } from '../api/resources.js';
import { sshFleetAddresses, type SshConfig } from '../api/ssh-fleet.js';
import { CHANNELS, runChange } from '../store/channels.js';
import type { Db, Queryable } from '../store/db.js';
import { recordEvent } from '../store/events.js';
import { applyFleet, type FleetDesired, type FleetRecord } from '../store/fleets.js';
import type { ProjectRecord } from '../store/projects.js';
import type { RunRecord } from '../store/runs.js';
import { forgetHostKeys } from '../store/ssh-host-keys.js';
import { checkServiceGateway, writeGateway, type WrittenGateway } from './gateways.js';
import { conflict, HttpError } from './http-errors.js';
import { submitRun } from './submit-run.js';
import type { BatchItem } from './specs.js';

export type Written =
  | { kind: 'fleet'; fleet: FleetRecord; action: FleetPlan['action'] }
  | { kind: 'run'; run: RunRecord }
  | WrittenGateway;

/**
 * Writes a fleet's new generation (or the fleet) and its event; nothing when the spec is unchanged. A fleet still
 * being deleted is refused: applying over it would otherwise answer success and then vanish with it.
 */
export async function writeFleet(q: Queryable, project: ProjectRecord, desired: FleetDesired): Promise<Written & { kind: 'fleet' }> {
  const { fleet, created, changed, deleting } = await applyFleet(q, project.id, desired);
  if (deleting) throw conflict(`fleet ${fleet.name} is being deleted (${fleet.statusMessage || 'its instances are terminating'}); apply it again once it is gone`);
  const ssh = desired.spec.ssh_config as SshConfig | undefined;
  // Within the apply, so that a host removed and added back by two applies is a first contact however soon they come.
  if (changed && ssh) await forgetHostKeys(q, fleet.id, sshFleetAddresses(ssh));
  if (changed) {
    await recordEvent(q, { projectId: project.id, objectKind: 'fleet', objectId: fleet.id, objectName: fleet.name, reason: created ? 'Created' : 'Updated', message: `generation ${fleet.generation}: nodes ${desired.nodesMin}..${desired.nodesMax ?? ''}, ${describeRequirement(desired.requirement)}` });
  }
  return { kind: 'fleet', fleet, action: created ? 'create' : changed ? 'update' : 'unchanged' };
}

/** An item that could not be written (a run name still in use), so that nothing was: says which, and why. */
export class ApplyItemError extends HttpError {
  /** The cause's message, without the item's place in the batch. */
  readonly reason: string;

  constructor(cause: HttpError, readonly index: number) {
    super(cause.status, cause.code, `nothing was applied: items[${index}]: ${cause.message}`, { index });
    this.reason = cause.message;
  }
}

/**
 * Writes validated fleets and runs (`checkedApplyItems`) in one transaction, all or nothing: a run name still in
 * use (409) leaves no fleet behind either. After the commit, the controllers that look after them are told.
 * `orchestrator apply` and the Kubernetes source controller both write through here.
 */
export async function applyItems(db: Db, project: ProjectRecord, userId: string, items: BatchItem[]): Promise<Written[]> {
  const written = await db.transaction(async (tx) => {
    const done: Written[] = [];
    // Gateways first, so that the services of the same apply find them.
    const order = [...items.keys()].sort((a, b) => Number(items[b]!.kind === 'gateway') - Number(items[a]!.kind === 'gateway'));
    for (const index of order) {
      const item = items[index]!;
      try {
        if (item.kind === 'gateway') done[index] = await writeGateway(tx, project, item.spec);
        else if (item.kind === 'fleet') done[index] = await writeFleet(tx, project, item.desired);
        else {
          if (item.spec.type === 'service') await checkServiceGateway(tx, project, item.spec);
          done[index] = { kind: 'run', run: await submitRun(tx, project, userId, item.spec, item.files, item.repos) };
        }
      } catch (error) {
        if (error instanceof HttpError) throw new ApplyItemError(error, index);
        throw error;
      }
    }
    return done;
  });
  const fleetsChanged = written.some((w) => w.kind === 'fleet' && w.action !== 'unchanged');
  if (fleetsChanged) await db.notify(CHANNELS.fleets);
  const runs = written.flatMap((w) => (w.kind === 'run' ? [w.run] : []));
  if (fleetsChanged) await db.notify(CHANNELS.runs);
  else if (runs.length > 0) await db.notify(CHANNELS.runs, runChange(runs));
  if (written.some((w) => w.kind === 'gateway' && w.action !== 'unchanged')) await db.notify(CHANNELS.gateways);
  return written;
}
