import { formatGpu } from '../../api/gpu.js';
import type { Condition, ConditionType, ResourceStatus } from '../../api/kubernetes.js';
import type { Fleet, Run } from '../../api/objects.js';

/** A condition as written: absent Reconciling and Stalled mean False, as kstatus reads them. */
interface Stated {
  ready: { status: boolean; reason: string; message: string };
  reconciling?: { reason: string; message: string };
  stalled?: { reason: string; message: string };
}

/** `failed_by_user_code` → `FailedByUserCode`: a condition's reason is one CamelCase word. */
export function camelCaseReason(text: string): string {
  return text.split(/[^A-Za-z0-9]+/).filter(Boolean).map((word) => word[0].toUpperCase() + word.slice(1)).join('') || 'Unknown';
}

/** The conditions for `stated`, keeping each one's lastTransitionTime while its status stays as it was. */
function conditionsOf(stated: Stated, generation: number, previous: Condition[] | undefined, now: string): Condition[] {
  const entries: [ConditionType, 'True' | 'False', string, string][] = [
    ['Ready', stated.ready.status ? 'True' : 'False', stated.ready.reason, stated.ready.message],
  ];
  if (stated.reconciling) entries.push(['Reconciling', 'True', stated.reconciling.reason, stated.reconciling.message]);
  if (stated.stalled) entries.push(['Stalled', 'True', stated.stalled.reason, stated.stalled.message]);
  return entries.map(([type, status, reason, message]) => {
    const before = previous?.find((condition) => condition.type === type);
    const lastTransitionTime = before && before.status === status ? before.lastTransitionTime : now;
    return { type, status, reason, message, lastTransitionTime, observedGeneration: generation };
  });
}

type StatusFields = { [K in Exclude<keyof ResourceStatus, 'observedGeneration' | 'conditions' | 'project'>]?: ResourceStatus[K] | null };

export interface StatusContext {
  generation: number;
  project: string;
  previous: ResourceStatus | undefined;
  now: string;
  /** config.yml's server_url, before a service's path; null leaves the path alone. */
  serverUrl: string | null;
}

function statusOf(context: StatusContext, stated: Stated, fields: StatusFields = {}): ResourceStatus {
  return {
    observedGeneration: context.generation,
    conditions: conditionsOf(stated, context.generation, context.previous?.conditions, context.now),
    project: context.project,
    ...Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined && value !== null)),
  };
}

/** An object the orchestrator cannot act on as it is (an invalid spec, a name in use): Stalled until it changes. */
export function stalledStatus(context: StatusContext, reason: string, message: string): ResourceStatus {
  return statusOf(context, { ready: { status: false, reason, message }, stalled: { reason, message } });
}

/** On the way somewhere the run or fleet does not show yet (its old run stopping, its deletion). */
export function reconcilingStatus(context: StatusContext, reason: string, message: string, fields: StatusFields = {}): ResourceStatus {
  return statusOf(context, { ready: { status: false, reason, message }, reconciling: { reason, message } }, fields);
}

/** A rollout that stalled is Stalled, and Ready while an older generation still serves. */
function stalledServiceStated(run: Run): Stated {
  const serving = run.service!.replicas.some((replica) => replica.state === 'ready');
  const message = run.statusMessage;
  return {
    ready: { status: serving, reason: serving ? 'Running' : 'Starting', message },
    stalled: { reason: run.service!.stall!.reason === 'failing' ? 'RolloutFailed' : 'RolloutWaiting', message },
  };
}

function serviceStated(run: Run): Stated {
  if (run.service?.stall) return stalledServiceStated(run);
  const replicas = run.service?.replicas ?? [];
  const current = replicas.filter((replica) => replica.generation === run.generation);
  const ready = current.filter((replica) => replica.state === 'ready').length;
  const wanted = run.service?.desiredReplicas ?? 0;
  const message = `${ready} of ${wanted} replicas of generation ${run.generation} ready`;
  const rolling = replicas.some((replica) => replica.generation !== run.generation && replica.state !== 'terminated');
  const settled = ready >= wanted && !rolling;
  return {
    ready: { status: ready > 0 || wanted === 0, reason: ready > 0 || wanted === 0 ? 'Running' : 'Starting', message },
    ...(settled ? {} : { reconciling: { reason: rolling ? 'Rolling' : 'Starting', message } }),
  };
}

function runStated(run: Run): Stated {
  const message = run.statusMessage || run.status;
  const reason = camelCaseReason(run.terminationReason ?? run.status);
  switch (run.status) {
    case 'pending':
      return run.schedule ? { ready: { status: true, reason: 'Scheduled', message } } : { ready: { status: false, reason: 'Pending', message }, reconciling: { reason: 'Pending', message } };
    case 'submitted':
    case 'provisioning':
    case 'terminating':
      return { ready: { status: false, reason: camelCaseReason(run.status), message }, reconciling: { reason: camelCaseReason(run.status), message } };
    case 'running':
      return run.kind === 'service' ? serviceStated(run) : { ready: { status: true, reason: 'Running', message } };
    case 'done':
      return { ready: { status: true, reason: 'Succeeded', message } };
    case 'failed':
    case 'terminated':
      // Ended without succeeding, stopped on purpose or not: nothing runs it again until its spec changes.
      return { ready: { status: false, reason, message }, stalled: { reason, message } };
  }
}

/** A task's, service's or dev environment's status from its run, first submitted at `submittedAt` (retries keep it). */
export function runStatus(context: StatusContext, run: Run, submittedAt: Date): ResourceStatus {
  return statusOf(context, runStated(run), {
    status: run.status,
    statusMessage: run.statusMessage,
    exitCode: run.exitCode,
    instance: run.instance,
    gpu: run.gpu ? formatGpu(run.gpu) : null,
    serviceUrl: run.service ? `${context.serverUrl ?? ''}${run.service.path}` : undefined,
    submittedAt: submittedAt.toISOString(),
  });
}

/** A fleet's status: Ready while active, Reconciling while instances start or it terminates, Stalled once it has ended. */
export function fleetStatus(context: StatusContext, fleet: Fleet): ResourceStatus {
  const live = fleet.instances.filter((instance) => instance.status !== 'terminated');
  const starting = live.filter((instance) => instance.status === 'pending' || instance.status === 'provisioning').length;
  const message = fleet.statusMessage || `${live.length} instance${live.length === 1 ? '' : 's'}${starting ? `, ${starting} starting` : ''}`;
  const fields = { status: fleet.status, statusMessage: fleet.statusMessage, instances: live.length };
  switch (fleet.status) {
    case 'active':
      return statusOf(context, { ready: { status: true, reason: 'Active', message }, ...(starting ? { reconciling: { reason: 'Provisioning', message } } : {}) }, fields);
    case 'terminating':
      return statusOf(context, { ready: { status: false, reason: 'Terminating', message }, reconciling: { reason: 'Terminating', message } }, fields);
    case 'terminated':
      return statusOf(context, { ready: { status: false, reason: 'Terminated', message }, stalled: { reason: 'Terminated', message } }, fields);
    case 'failed':
      return statusOf(context, { ready: { status: false, reason: 'Failed', message }, stalled: { reason: 'Failed', message } }, fields);
  }
}
