import { FINISHED_RUN_STATUSES } from '../api/status.js';
import type { Queryable } from '../store/db.js';
import { instanceCounts, runCounts } from '../store/metrics.js';

/** What each backend's live instances are, once the server is gone. */
const INSTANCE_NATURE: Record<string, string> = {
  local: 'agents on this machine',
  gpucloud: 'rented, still billed',
  kubernetes: 'pods',
};

/**
 * What a stopping server leaves running and that a restart picks it up: `stopping: still running without the
 * server: 1 run; 1 instance on local (agents on this machine). orchestrator server picks them up again.`
 */
export async function shutdownNote(db: Queryable): Promise<string> {
  const [runs, instances] = await Promise.all([runCounts(db), instanceCounts(db)]);
  const liveRuns = runs.filter((row) => !(FINISHED_RUN_STATUSES as readonly string[]).includes(row.status)).reduce((sum, row) => sum + row.count, 0);
  const byBackend = new Map<string, number>();
  for (const row of instances) if (row.status !== 'terminated') byBackend.set(row.backend, (byBackend.get(row.backend) ?? 0) + row.count);
  if (liveRuns === 0 && byBackend.size === 0) return 'stopping: nothing was running';
  const parts = [
    ...(liveRuns === 0 ? [] : [`${liveRuns} ${liveRuns === 1 ? 'run' : 'runs'}`]),
    ...[...byBackend].map(([backend, count]) => `${count} ${count === 1 ? 'instance' : 'instances'} on ${backend}${INSTANCE_NATURE[backend] ? ` (${INSTANCE_NATURE[backend]})` : ''}`),
  ];
  return `stopping: still running without the server: ${parts.join(', ')}. Starting orchestrator server again picks them up.`;
}
