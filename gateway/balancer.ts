import type { ReplicaRoute } from '../api/services.js';

/**
 * Least outstanding requests: each request goes to the replica with the fewest exchanges in flight from
 * this process; among equals, the one numbered after the last chosen (replicas come in order of their numbers), so that idle
 * replicas take turns.
 */
export class Balancer {
  private readonly outstanding = new Map<string, number>();
  /** Per service, the replica number chosen last. */
  private readonly lastChosen = new Map<string, number>();

  /** Picks a replica and counts the exchange on it until `release`; undefined when none is left after `excluded`. */
  acquire(serviceId: string, replicas: readonly ReplicaRoute[], excluded: ReadonlySet<string> = new Set()): ReplicaRoute | undefined {
    // One pass and no arrays: it runs for every request.
    const last = this.lastChosen.get(serviceId) ?? -1;
    let chosen: ReplicaRoute | undefined;
    let fewest = Infinity;
    let chosenAfterLast = false;
    for (const replica of replicas) {
      if (excluded.has(replica.id)) continue;
      const count = this.count(replica.id);
      const afterLast = replica.replica > last;
      if (count < fewest || (count === fewest && afterLast && !chosenAfterLast)) {
        chosen = replica;
        fewest = count;
        chosenAfterLast = afterLast;
      }
    }
    if (!chosen) return undefined;
    this.lastChosen.set(serviceId, chosen.replica);
    this.outstanding.set(chosen.id, fewest + 1);
    return chosen;
  }

  release(replica: ReplicaRoute): void {
    const left = this.count(replica.id) - 1;
    if (left > 0) this.outstanding.set(replica.id, left);
    else this.outstanding.delete(replica.id);
  }

  private count(id: string): number {
    return this.outstanding.get(id) ?? 0;
  }
}
