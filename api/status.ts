import { Type, type Static } from '@sinclair/typebox';

export const RunStatus = Type.Union([
  Type.Literal('pending'), Type.Literal('submitted'), Type.Literal('provisioning'),
  Type.Literal('running'), Type.Literal('terminating'),
  Type.Literal('terminated'), Type.Literal('failed'), Type.Literal('done'),
]);
export type RunStatus = Static<typeof RunStatus>;
export const FINISHED_RUN_STATUSES: readonly RunStatus[] = ['terminated', 'failed', 'done'];

export const RunTerminationReason = Type.Union([
  Type.Literal('done_by_user_code'),
  Type.Literal('failed_by_user_code'),
  Type.Literal('stopped_by_user'),
  Type.Literal('aborted_by_user'),
  Type.Literal('no_fleet_matches'),
  Type.Literal('no_offers'),
  Type.Literal('provisioning_failed'),
  Type.Literal('instance_unreachable'),
  Type.Literal('instance_terminated'),
  Type.Literal('max_duration_exceeded'),
  Type.Literal('inactivity_duration_exceeded'),
  Type.Literal('submit_failed'),
  Type.Literal('interrupted'),
  Type.Literal('gpu_underutilized'),
  Type.Literal('budget_exceeded'),
]);
export type RunTerminationReason = Static<typeof RunTerminationReason>;

/** Why a run that was asked to stop ended: its user stopped or aborted it, or its project's budget (recorded when asked) did. */
export function stopReason(run: { desired: string; terminationReason: string | null }): RunTerminationReason {
  if (run.desired === 'abort') return 'aborted_by_user';
  return run.terminationReason === 'budget_exceeded' ? 'budget_exceeded' : 'stopped_by_user';
}

export const InstanceStatus = Type.Union([
  Type.Literal('pending'), Type.Literal('provisioning'), Type.Literal('idle'),
  Type.Literal('busy'), Type.Literal('terminating'), Type.Literal('terminated'),
]);
export type InstanceStatus = Static<typeof InstanceStatus>;

export const InstanceTerminationReason = Type.Union([
  Type.Literal('idle_timeout'),
  Type.Literal('fleet_deleted'),
  Type.Literal('unreachable'),
  Type.Literal('provisioning_timeout'),
  Type.Literal('provisioning_failed'),
  Type.Literal('no_offers'),
  Type.Literal('no_capacity'),
  Type.Literal('terminated_by_backend'),
  Type.Literal('above_max_nodes'),
  Type.Literal('interrupted'),
  Type.Literal('budget_exceeded'),
  Type.Literal('removed_from_fleet'),
]);
export type InstanceTerminationReason = Static<typeof InstanceTerminationReason>;

export const FleetStatus = Type.Union([
  Type.Literal('active'), Type.Literal('terminating'),
  Type.Literal('terminated'), Type.Literal('failed'),
]);
export type FleetStatus = Static<typeof FleetStatus>;
