import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'winston';
import { FINALIZER, type Condition, type ResourceStatus } from '../../api/kubernetes.js';
import type { RunSpec, SpecType } from '../../api/spec.js';
import { FINISHED_RUN_STATUSES, type RunStatus } from '../../api/status.js';
import { CHANNELS } from '../../store/channels.js';
import type { Db } from '../../store/db.js';
import { recordEvent } from '../../store/events.js';
import { fleetView, getLiveFleet, requestFleetDeletion } from '../../store/fleets.js';
import { listInstanceViews } from '../../store/instances.js';
import { getProject, type ProjectRecord } from '../../store/projects.js';
import { getRunView } from '../../store/run-views.js';
import { getRunByName, requestRunStop, type RunRecord } from '../../store/runs.js';
import { isLiveSchedule } from '../../store/schedules.js';
import { applyItems, ApplyItemError } from '../apply.js';
import { checkedItem, type ApplyingItem } from '../specs.js';
import type { Cluster, CustomResource } from './cluster.js';
import { fleetStatus, reconcilingStatus, runStatus, stalledStatus, type StatusContext } from './status.js';

/**
 * The events a status change is told as: the Stalled reason (a warning), else the Ready reason when it moved, else
 * the Reconciling one; nothing when the reasons stayed as they were.
 */
function conditionChanges(before: ResourceStatus | undefined, after: ResourceStatus): { type: 'Normal' | 'Warning'; reason: string; message: string }[] {
  const reasonOf = (status: ResourceStatus | undefined, type: Condition['type']) => status?.conditions.find((c) => c.type === type);
  for (const type of ['Stalled', 'Ready', 'Reconciling'] as const) {
    const now = reasonOf(after, type);
    const was = reasonOf(before, type);
    if (now && (now.reason !== was?.reason || now.status !== was?.status)) {
      return [{ type: type === 'Stalled' ? 'Warning' : 'Normal', reason: now.reason, message: now.message }];
    }
  }
  return [];
}

/** Why the orchestrator's side of an object goes: the condition reason, the event's wording, and until when. */
interface Release {
  reason: string;
  cause: string;
  until: string;
}

/** The copy of the object this reconcile acted on is out of date: read it again and start over. */
export class StaleObject extends Error {}

/** A spec as `orchestrator apply` would send it: the object's kind and name, and its spec as written. */
function specOf(type: SpecType, object: CustomResource): Record<string, unknown> {
  return { ...object.spec, type, name: object.metadata.name };
}

/** Specs compared as the JSON the database keeps them as. */
function sameSpec(stored: Record<string, unknown>, spec: RunSpec): boolean {
  return isDeepStrictEqual(JSON.parse(JSON.stringify(stored)), JSON.parse(JSON.stringify(spec)));
}

function isActive(run: RunRecord): boolean {
  return !FINISHED_RUN_STATUSES.includes(run.status);
}

/** A live run that takes a new spec in place when applied again (a service rolls, a schedule changes). */
function takesUpdates(run: RunRecord): boolean {
  return (run.kind === 'service' && run.desired === 'run') || isLiveSchedule(run);
}

/** creationTimestamp is in whole seconds: a run submitted within the second it names may be from before the object. */
const CREATION_TIMESTAMP_PRECISION_MS = 1000;

/**
 * Whether the run of this name is the one the object started: the run its status names, or one first submitted
 * after the object was created (which covers a server that stopped between submitting and writing the status). A
 * run of the same name from before the object (applied otherwise, or for an object deleted and created again) is
 * not: the object gets a run of its own.
 */
function startedBy(object: CustomResource, run: RunRecord): boolean {
  const created = object.metadata.creationTimestamp ? new Date(object.metadata.creationTimestamp).getTime() : Infinity;
  return object.status?.submittedAt === run.firstSubmittedAt.toISOString() || run.firstSubmittedAt.getTime() >= created + CREATION_TIMESTAMP_PRECISION_MS;
}

/** Each problem as `orchestrator apply` words it, located by its field in the object (`spec.resources.gpu`). */
function checkedObject(type: SpecType, object: CustomResource, project: ProjectRecord): { item: ApplyingItem | null; problems: string[] } {
  const problems: string[] = [];
  const problem = (path: string, message: string) => problems.push(`${path === 'spec.name' ? 'metadata.name' : path}: ${message}`);
  const item = checkedItem({ spec: specOf(type, object) }, project, problem);
  if (Array.isArray(object.spec?.files) && object.spec.files.length > 0) {
    problem('spec.files', 'files are read from the applier\'s machine, which a custom resource does not have; put them in the image, or in a repo the spec names by url');
  }
  return { item: problems.length === 0 ? item : null, problems };
}

/**
 * Moves one custom resource a step toward its spec through the same validation and writes as `orchestrator apply`,
 * and writes what happened into its status. Level-triggered: it decides from the object and the database alone, so
 * running it again, or on another server at the same time, ends in the same place.
 */
export class Reconciler {
  constructor(private readonly db: Db, private readonly cluster: Cluster, private readonly userId: string, private readonly logger: Logger,
    private readonly serverUrl: string | null) {}

  async reconcile(type: SpecType, object: CustomResource, projectName: string): Promise<void> {
    const context: StatusContext = {
      generation: object.metadata.generation ?? 0, project: projectName, previous: object.status, now: new Date().toISOString(), serverUrl: this.serverUrl,
    };
    // A deleted object's run is stopped in the project it was applied to, even if its namespace has moved since.
    if (object.metadata.deletionTimestamp) return this.finalize(type, object, await getProject(this.db, object.status?.project ?? projectName), context);
    const project = await getProject(this.db, projectName);
    let current = object;
    if (!(object.metadata.finalizers ?? []).includes(FINALIZER)) {
      current = await this.cluster.setFinalizers(type, object, [...(object.metadata.finalizers ?? []), FINALIZER]);
    }
    if (!project) {
      // The project its run is in stays in the status, so that deleting the object still stops that run.
      return this.writeStatus(type, current, stalledStatus({ ...context, project: object.status?.project ?? projectName }, 'UnknownProject',
        `project ${projectName} is not in the orchestrator server's config.yml; label the namespace ${object.metadata.namespace} with orchestrator.dev/project=<a project that is>`));
    }
    const moved = object.status?.project;
    if (moved !== undefined && moved !== projectName) {
      // Its namespace now maps to another project. What the object made in the one before goes first, so that no
      // instance is left running for it there; a run that has finished there stays its run until the spec changes.
      const before = await getProject(this.db, moved);
      const staying = await this.release(type, current, before, context, {
        reason: 'Moving', cause: `moved to project ${projectName} with its namespace`, until: `before it runs in project ${projectName}`,
      }) ?? await this.finishedIn(type, current, before, context);
      if (staying) return this.writeStatus(type, current, staying);
    }
    const { item, problems } = checkedObject(type, object, project);
    if (!item) return this.writeStatus(type, current, stalledStatus(context, 'InvalidSpec', problems.join('; ')));
    const status = item.kind === 'fleet' ? await this.applyFleet(project, item, context) : await this.applyRun(type, current, project, item, context);
    await this.writeStatus(type, current, status);
  }

  private async applyFleet(project: ProjectRecord, item: ApplyingItem, context: StatusContext): Promise<ResourceStatus> {
    const [written] = await applyItems(this.db, project, this.userId, [item]);
    if (written.kind !== 'fleet') throw new Error('a fleet was applied as a run');
    const instances = await listInstanceViews(this.db, project.id, { fleetId: written.fleet.id, includeTerminated: false });
    return fleetStatus(context, fleetView(written.fleet, project.name, instances));
  }

  private async applyRun(type: SpecType, object: CustomResource, project: ProjectRecord, item: ApplyingItem & { kind: 'run' }, context: StatusContext): Promise<ResourceStatus> {
    const name = object.metadata.name;
    const run = await getRunByName(this.db, project.id, name);
    const same = run !== null && sameSpec(run.spec, item.spec);
    const ours = run !== null && startedBy(object, run);
    if (run && isActive(run) && !same && ours && !takesUpdates(run)) {
      // A new generation of a task or dev environment: its run stops first, and the new spec is submitted once it has.
      if (run.desired === 'run') {
        await requestRunStop(this.db, run.id, false);
        await recordEvent(this.db, { projectId: project.id, objectKind: 'run', objectId: run.id, objectName: name, reason: 'Stopping', message: `generation ${context.generation} of ${type} ${object.metadata.namespace}/${name} replaces it` });
        await this.db.notify(CHANNELS.runs);
      }
      return reconcilingStatus(context, 'Replacing', `stopping run ${name} to apply generation ${context.generation}`, { status: run.status, submittedAt: object.status?.submittedAt });
    }
    const previous = object.status;
    if (!run && previous?.project === project.name && previous.observedGeneration === context.generation
      && previous.status !== undefined && FINISHED_RUN_STATUSES.includes(previous.status as RunStatus)) {
      // This generation's run ended and was then deleted (`orchestrator delete`): it is not run again until the spec changes.
      return previous;
    }
    let applied = run;
    if (!run || (isActive(run) ? !same : !(ours && same))) {
      if (run && !isActive(run)) await this.confirmFresh(type, object);
      try {
        const [written] = await applyItems(this.db, project, this.userId, [item]);
        if (written.kind !== 'run') throw new Error('a run was applied as a fleet');
        applied = written.run;
      } catch (error) {
        if (!(error instanceof ApplyItemError) || error.status !== 409) throw error;
        const now = await getRunByName(this.db, project.id, name);
        // Another server applied the same object a moment ago: its run is this object's run.
        if (!now || !isActive(now) || !sameSpec(now.spec, item.spec)) return stalledStatus(context, 'NameInUse', error.reason);
        applied = now;
      }
    }
    return runStatus(context, await getRunView(this.db, applied!.id), applied!.firstSubmittedAt);
  }

  /**
   * A new run is submitted only on the object as the API server has it now, not on an older copy: another
   * server that has just submitted it has also written its status, and that run counts as this object's.
   */
  private async confirmFresh(type: SpecType, object: CustomResource): Promise<void> {
    const fresh = await this.cluster.get(type, object.metadata.namespace, object.metadata.name);
    if (!fresh || fresh.metadata.resourceVersion !== object.metadata.resourceVersion) throw new StaleObject();
  }

  /** Deletion: the run stops (or the fleet is deleted) first; the finalizer goes once it has. */
  private async finalize(type: SpecType, object: CustomResource, project: ProjectRecord | null, context: StatusContext): Promise<void> {
    const finalizers = object.metadata.finalizers ?? [];
    if (!finalizers.includes(FINALIZER)) return;
    const releasing = await this.release(type, object, project, context, {
      reason: type === 'fleet' ? 'Deleting' : 'Stopping', cause: 'was deleted in Kubernetes', until: 'before the object is deleted',
    });
    if (releasing) return this.writeStatus(type, object, releasing);
    await this.cluster.setFinalizers(type, object, finalizers.filter((finalizer) => finalizer !== FINALIZER));
  }

  /**
   * Stops the run the object started in `project`, or deletes its fleet there: the status to write while that is
   * under way (naming that project, so that a server that restarts meanwhile finds it again), null once nothing
   * of the object is left in it.
   */
  private async release(type: SpecType, object: CustomResource, project: ProjectRecord | null, context: StatusContext, why: Release): Promise<ResourceStatus | null> {
    if (!project) return null;
    const { name, namespace } = object.metadata;
    const there = { ...context, project: project.name };
    const event = async (objectKind: 'fleet' | 'run', objectId: string, reason: string) => {
      await recordEvent(this.db, { projectId: project.id, objectKind, objectId, objectName: name, reason, message: `${type} ${namespace}/${name} ${why.cause}` });
    };
    if (type === 'fleet') {
      const fleet = await getLiveFleet(this.db, project.id, name);
      if (!fleet) return null;
      if (fleet.status === 'active') {
        await requestFleetDeletion(this.db, fleet.id);
        await event('fleet', fleet.id, 'Deleting');
        await this.db.notify(CHANNELS.fleets);
      }
      return reconcilingStatus(there, why.reason, `deleting fleet ${name} of project ${project.name} ${why.until}; its instances are terminated first`, { status: 'terminating' });
    }
    const run = await getRunByName(this.db, project.id, name);
    if (!run || !isActive(run) || !startedBy(object, run)) return null;
    if (run.desired === 'run') {
      await requestRunStop(this.db, run.id, false);
      await event('run', run.id, 'Stopping');
      await this.db.notify(CHANNELS.runs);
    }
    return reconcilingStatus(there, why.reason, `stopping run ${name} of project ${project.name} ${why.until}`, { status: run.status, submittedAt: object.status?.submittedAt });
  }

  /**
   * The status of the run the object started in `project` when it ended there by itself (done or failed) with the object's
   * spec, else null; a run that was stopped (by the move, or by a user) is not an outcome to keep.
   */
  private async finishedIn(type: SpecType, object: CustomResource, project: ProjectRecord | null, context: StatusContext): Promise<ResourceStatus | null> {
    if (!project || type === 'fleet') return null;
    const run = await getRunByName(this.db, project.id, object.metadata.name);
    if (!run || (run.status !== 'done' && run.status !== 'failed') || !startedBy(object, run)) return null;
    const { item } = checkedObject(type, object, project);
    if (item?.kind !== 'run' || !sameSpec(run.spec, item.spec)) return null;
    return runStatus({ ...context, project: project.name }, await getRunView(this.db, run.id), run.firstSubmittedAt);
  }

  /**
   * Writes the status when it differs from the object's; idempotent, so two servers writing the same one agree.
   * A condition that changed is also told as an event, by the server whose write went through.
   */
  private async writeStatus(type: SpecType, object: CustomResource, status: ResourceStatus): Promise<void> {
    if (isDeepStrictEqual(object.status, status)) return;
    const written = await this.cluster.writeStatus(type, object, status);
    for (const change of conditionChanges(object.status, status)) {
      // The status is what counts; an event the API server refuses is only logged.
      await this.cluster.recordEvent(written, change.type, change.reason, change.message)
        .catch((error) => this.logger.warn(`kubernetes: ${type} ${object.metadata.namespace}/${object.metadata.name}: event ${change.reason} not recorded: ${(error as Error).message}`));
    }
  }
}
