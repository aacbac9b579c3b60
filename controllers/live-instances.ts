import type { Queryable } from '../store/db.js';
import { liveProjectInstanceVersions, versionedInstances, type InstanceRecord, type VersionedInstance } from '../store/instances.js';

/**
 * Each project's live instances as the scheduler reads them every pass: their order and row versions are read each
 * time (narrow rows), and only the instances new or written since the last pass are read whole and parsed. A pass gets
 * copies, which its placements change as they take instances.
 */
export class LiveInstances {
  private readonly kept = new Map<string, Map<string, VersionedInstance>>();

  async read(db: Queryable, projectId: string): Promise<InstanceRecord[]> {
    const versions = await liveProjectInstanceVersions(db, projectId);
    const before = this.kept.get(projectId) ?? new Map<string, VersionedInstance>();
    const stale = versions.filter(({ id, version }) => before.get(id)?.version !== version).map(({ id }) => id);
    const fresh = new Map(stale.length === 0 ? [] : (await versionedInstances(db, stale)).map((read) => [read.instance.id, read]));
    const kept = new Map<string, VersionedInstance>();
    const instances: InstanceRecord[] = [];
    for (const { id } of versions) {
      const found = fresh.get(id) ?? before.get(id);
      // Ended since its version was read: as the pass would have read it a moment later.
      if (!found || found.instance.status === 'terminated') continue;
      kept.set(id, found);
      instances.push({ ...found.instance });
    }
    this.kept.set(projectId, kept);
    return instances;
  }
}
