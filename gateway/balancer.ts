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
    const candidates = replicas.filter((replica) => !excluded.has(replica.id));
    if (candidates.length === 0) return undefined;
    const fewest = Math.min(...candidates.map((replica) => this.count(replica.id)));
    const tied = candidates.filter((replica) => this.count(replica.id) === fewest);
    const last = this.lastChosen.get(serviceId) ?? -1;
    const chosen = tied.find((replica) => replica.replica > last) ?? tied[0]!;
    this.lastChosen.set(serviceId, chosen.replica);
    this.outstanding.set(chosen.id, this.count(chosen.id) + 1);
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
