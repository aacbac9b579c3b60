import type { RunStatus } from '../api/status.js';
import { nodeCount } from './nodes.js';

/** The NOTIFY channels of the shared database: whatever changes rows says so on theirs, and whoever looks after them listens. */
export const CHANNELS = {
  fleets: 'orchestrator_fleets',
  instances: 'orchestrator_instances',
  runs: 'orchestrator_runs',
  /** Routing changed: a replica became ready or left rotation, or a service came or went. */
  serviceRoutes: 'orchestrator_service_routes',
  gateways: 'orchestrator_gateways',
  /** A project's budget was set or removed: its spend is counted against the new one. */
  budgets: 'orchestrator_budgets',
  /** A webhook was added: its deliveries may start. */
  webhooks: 'orchestrator_webhooks',
} as const;

/** A word of a `runs` payload: a changed run is a service, a multi-node task, or one of their jobs. */
const FAMILY = 'family';
/** A word of a `runs` payload in place of `provisioning`: the run was placed and the server that placed it starts it, so no loop need wake. */
const STARTING = 'starting';

/** What of a changed run its `runs` NOTIFY tells: its new status, and whether it is a service's or a multi-node task's. */
export interface ChangedRun {
  status: RunStatus;
  kind: string;
  replica: number | null;
  spec: Record<string, unknown>;
  /** Placed and leased to the placing server's start loop, which starts it without a claim (controllers/scheduler.ts). */
  startedByPlacer?: boolean;
}

/** The changes a loop on `runs` acts on: runs now in one of these statuses, and (`family`) any change of a service's or multi-node task's runs. */
export interface RunInterest {
  statuses: readonly RunStatus[];
  family?: boolean;
}

/**
 * The payload of a NOTIFY on `runs` after these runs changed: their statuses, and `family` where one belongs to a
 * service or a multi-node task, so that only the loops they concern wake. A NOTIFY without a payload concerns every
 * loop on the channel; so does anything that changes runs in a way no status says (a stop, a fleet applied).
 */
export function runChange(runs: ChangedRun[]): string {
  const words = new Set<string>();
  for (const run of runs) {
    words.add(run.startedByPlacer ? STARTING : run.status);
    if (run.kind === 'service' || run.replica !== null || nodeCount(run.spec) > 1) words.add(FAMILY);
  }
  return [...words].join(' ');
}

/** Whether a NOTIFY on `runs` with this payload may concern a loop with this interest. */
export function concerns(payload: string, interest: RunInterest): boolean {
  if (payload === '') return true;
  const words = payload.split(' ');
  return (interest.family === true && words.includes(FAMILY)) || interest.statuses.some((status) => words.includes(status));
}
