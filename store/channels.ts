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
