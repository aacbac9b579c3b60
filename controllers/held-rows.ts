import type { Row } from '../store/db.js';

interface Held {
  row: Row;
  dueAt: number;
  group: string;
}

/**
 * The rows a controller keeps leased between reconciles (`holding` in leased.ts), each with when it falls due, in the
 * order they fall due: a pass takes the earliest and their groups' siblings without walking every held row. At 10 000
 * running jobs a pass walked and sorted them all, though it took a thousand at most.
 */
export class HeldRows {
  private readonly byId = new Map<string, Held>();
  private readonly byGroup = new Map<string, Set<string>>();
  /** A min-heap on `dueAt`; an entry whose row has gone or fell due at another time since is skipped when it surfaces. */
  private readonly heap: Array<{ id: string; dueAt: number }> = [];

  get size(): number {
    return this.byId.size;
  }

  /** Holds `row`, due at `dueAt`, with the other rows of `group`. */
  set(row: Row, dueAt: number, group: string): void {
    const id = row.id as string;
    this.delete(id);
    this.byId.set(id, { row, dueAt, group });
    const members = this.byGroup.get(group);
    if (members) members.add(id);
    else this.byGroup.set(group, new Set([id]));
    this.push({ id, dueAt });
  }

  /** Makes a held row due now; false when it is not held. */
  makeDue(id: string): boolean {
    const held = this.byId.get(id);
    if (!held) return false;
    held.dueAt = 0;
    this.push({ id, dueAt: 0 });
    return true;
  }

  /** When the earliest held row falls due; infinity when none is held. */
  earliestDueAt(): number {
    return this.top()?.dueAt ?? Number.POSITIVE_INFINITY;
  }

  /**
   * Takes (no longer holds) the groups whose earliest row falls due by `dueBy`, earliest first, each with its rows that
   * fall due by `siblingsBy`, as many as fit in `room` rows (the first group whatever its size).
   */
  takeDue(dueBy: number, siblingsBy: number, room: number): Array<{ row: Row; dueAt: number }> {
    const taken: Array<{ row: Row; dueAt: number }> = [];
    const groupBy = Math.max(siblingsBy, dueBy);
    for (let first = this.top(); first && first.dueAt <= dueBy; first = this.top()) {
      const group = [...this.byGroup.get(this.byId.get(first.id)!.group)!]
        .map((id) => this.byId.get(id)!)
        .filter((held) => held.dueAt <= groupBy);
      if (taken.length > 0 && taken.length + group.length > room) break;
      for (const held of group) {
        this.delete(held.row.id as string);
        taken.push({ row: held.row, dueAt: held.dueAt });
      }
    }
    return taken;
  }

  clear(): void {
    this.byId.clear();
    this.byGroup.clear();
    this.heap.length = 0;
  }

  private delete(id: string): void {
    const held = this.byId.get(id);
    if (!held) return;
    this.byId.delete(id);
    const members = this.byGroup.get(held.group)!;
    members.delete(id);
    if (members.size === 0) this.byGroup.delete(held.group);
  }

  /** The heap's earliest entry that still stands for a held row, dropping those that no longer do. */
  private top(): { id: string; dueAt: number } | undefined {
    while (this.heap.length > 0) {
      const first = this.heap[0]!;
      if (this.byId.get(first.id)?.dueAt === first.dueAt) return first;
      this.pop();
    }
    return undefined;
  }

  private push(entry: { id: string; dueAt: number }): void {
    const heap = this.heap;
    heap.push(entry);
    for (let at = heap.length - 1; at > 0;) {
      const parent = (at - 1) >> 1;
      if (heap[parent]!.dueAt <= entry.dueAt) break;
      heap[at] = heap[parent]!;
      heap[parent] = entry;
      at = parent;
    }
  }

  private pop(): void {
    const heap = this.heap;
    const last = heap.pop()!;
    if (heap.length === 0) return;
    heap[0] = last;
    for (let at = 0; ;) {
      const left = 2 * at + 1;
      const right = left + 1;
      let least = at;
      if (left < heap.length && heap[left]!.dueAt < heap[least]!.dueAt) least = left;
      if (right < heap.length && heap[right]!.dueAt < heap[least]!.dueAt) least = right;
      if (least === at) return;
      [heap[at], heap[least]] = [heap[least]!, heap[at]!];
      at = least;
    }
  }
}
