import { setTimeout as sleep } from 'node:timers/promises';
import type { Run } from '../api/objects.js';
import { serviceSettings } from '../api/service-settings.js';
import type { Replica, ServiceInfo } from '../api/services.js';
import type { ServiceSpec } from '../api/spec.js';
import { ConnectionLostError, ServerUnreachableError, type ApiClient } from './client.js';
import { isFinished, runPath } from './follow.js';
import type { StatusDisplay } from './progress.js';

const POLL_MS = 500;
const MAX_FAILED_LOOKS = 3;

/**
 * How following a service ended: a replica of its current generation is ready; it needs none to be
 * published (zero replicas, started by the first request); it ended first; its rollout stalled while
 * an older generation serves; or the user pressed Ctrl-C.
 */
export type ServiceOutcome =
  | { kind: 'ready'; run: Run }
  | { kind: 'at-zero'; run: Run }
  | { kind: 'ended'; run: Run }
  | { kind: 'stalled'; run: Run }
  | { kind: 'interrupted' };

/** `replica 0: ready on local-0`, `replica 1: provisioning: waiting: fleet local is at its maximum of 1 node`. */
export function replicaLine(replica: Replica): string {
  const where = replica.instance && replica.state !== 'provisioning' ? ` on ${replica.instance}` : '';
  const why = replica.state === 'provisioning' && replica.statusMessage ? `: ${replica.statusMessage}` : '';
  const group = replica.group === null ? '' : ` (group ${replica.group})`;
  return `replica ${replica.replica}${group}: ${replica.state}${where}${why}`;
}

/** The lines that say where the service is reached: under the server's URL as this client knows it. */
export function serviceAddresses(serverUrl: string, service: ServiceInfo): string {
  const lines = [`Service:  ${serverUrl}${service.path}`];
  if (service.gatewayUrl !== null) lines.push(`Gateway:  ${service.gatewayUrl}`);
  if (service.model !== null && service.modelPath !== null) {
    lines.push(`Model:    ${serverUrl}${service.modelPath}   (model: ${service.model}, OpenAI-compatible)`);
    if (service.gatewayModelUrl !== null) lines.push(`          ${service.gatewayModelUrl}   (the same, on the gateway)`);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * Every replica group with a replica that serves or is on its way has one of the current generation ready (a service
 * without groups is one group): an update that leaves a group as it was moves that group's replicas to the new
 * generation as they are, so a changed group still waits for one of its own.
 */
function readyInGeneration(run: Run): boolean {
  const replicas = (run.service?.replicas ?? []).filter((replica) => replica.state !== 'draining' && replica.state !== 'terminated');
  const groups = new Set(replicas.map((replica) => replica.group));
  return groups.size > 0 && [...groups].every((group) => replicas.some((r) => r.group === group && r.state === 'ready' && r.generation === run.generation));
}

/**
 * Looks at the service twice a second, showing its status and each replica's state as they change,
 * until a replica of its current generation is ready in each group (an update waits for the new spec), it ends, its rollout
 * stalls, or Ctrl-C.
 */
export async function followService(client: ApiClient, name: string, display: StatusDisplay): Promise<ServiceOutcome> {
  const controller = new AbortController();
  const interrupt = () => controller.abort();
  process.on('SIGINT', interrupt);
  const shown = new Map<number, string>();
  let failedLooks = 0;
  try {
    while (!controller.signal.aborted) {
      let run: Run;
      try {
        run = await client.get<Run>(runPath(client, name));
        failedLooks = 0;
      } catch (error) {
        if (!(error instanceof ServerUnreachableError || error instanceof ConnectionLostError) || ++failedLooks > MAX_FAILED_LOOKS) throw error;
        await sleep(POLL_MS * 2, undefined, { signal: controller.signal }).catch(() => undefined);
        continue;
      }
      for (const replica of run.service?.replicas ?? []) {
        const line = replicaLine(replica);
        if (shown.get(replica.replica) === line) continue;
        shown.set(replica.replica, line);
        display.around(() => process.stderr.write(`${line}\n`));
      }
      display.update(run.status, run.statusMessage);
      if (isFinished(run)) return { kind: 'ended', run };
      if (readyInGeneration(run)) return { kind: 'ready', run };
      if (run.service?.stall?.generation === run.generation && run.service.stableGeneration !== run.generation) return { kind: 'stalled', run };
      if (serviceSettings(run.spec as ServiceSpec).replicas.min === 0 && run.service?.desiredReplicas === 0) return { kind: 'at-zero', run };
      await sleep(POLL_MS, undefined, { signal: controller.signal }).catch(() => undefined);
    }
    return { kind: 'interrupted' };
  } finally {
    process.off('SIGINT', interrupt);
    display.stop();
  }
}
