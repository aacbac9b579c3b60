import { randomUUID } from 'node:crypto';
import { isDeepStrictEqual } from 'node:util';
import type { Fleet, Instance } from '../api/objects.js';
import type { BackendType } from '../api/offer.js';
import type { ResourceRequirement } from '../api/resources.js';
import type { FleetStatus } from '../api/status.js';
import { plannedOnce, type Queryable, type Row } from './db.js';

export interface FleetRecord {
  id: string;
  projectId: string;
  name: string;
  spec: Record<string, unknown>;
  requirement: ResourceRequirement;
  nodesMin: number;
  nodesMax: number | null;
  /** `nodes.target`, from the fleet's spec. */
  nodesTarget: number;
  /**
   * The instances to reach before the fleet falls back to keeping nodes.min: nodes.target, set when apply creates
   * or changes the fleet and cleared once that many are there; null otherwise.
   */
  provisionTarget: number | null;
  idleSeconds: number | null;
  backends: BackendType[];
  /** The backend's cluster that a `placement: cluster` fleet's instances are created in, once its first instance made one. */
  cluster: FleetCluster | null;
  generation: number;
  status: FleetStatus;
  statusMessage: string;
  deleted: boolean;
  /** When apply last sent this fleet, changed or not: an SSH fleet's failed hosts are tried again after it. */
  appliedAt: Date;
  createdAt: Date;
}

export interface FleetCluster {
  backend: BackendType;
  id: string;
  region: string;
  /** The GPU model of its machines (the offer's gpu.name). */
  gpu: string;
}

/** What `apply` writes for a fleet: its spec and the settings derived from it (nodesTarget is nodesMin when left out). */
export type FleetDesired = Pick<FleetRecord, 'name' | 'spec' | 'requirement' | 'nodesMin' | 'nodesMax' | 'idleSeconds' | 'backends'> & Partial<Pick<FleetRecord, 'nodesTarget'>>;

export const toFleet = (r: Row): FleetRecord => ({
  id: r.id, projectId: r.project_id, name: r.name, spec: r.spec, requirement: r.requirement,
  nodesMin: r.nodes_min, nodesMax: r.nodes_max, nodesTarget: r.nodes_target ?? r.nodes_min, provisionTarget: r.provision_target ?? null, idleSeconds: r.idle_seconds, backends: r.backends, cluster: r.cluster ?? null,
  generation: r.generation, status: r.status, statusMessage: r.status_message, deleted: r.deleted, appliedAt: r.applied_at, createdAt: r.created_at,
});

export function fleetView(f: FleetRecord, project: string, instances: Instance[]): Fleet {
  return {
    id: f.id, project, name: f.name, status: f.status, statusMessage: f.statusMessage, generation: f.generation,
    spec: f.spec, instances, createdAt: f.createdAt.toISOString(),
  };
}

export async function getLiveFleet(db: Queryable, projectId: string, name: string): Promise<FleetRecord | null> {
  const rows = await db.query(
    `SELECT * FROM fleets WHERE project_id = $1 AND name = $2 AND status NOT IN ('terminated', 'failed')`, [projectId, name]);
  return rows[0] ? toFleet(rows[0]) : null;
}

export async function getFleetById(db: Queryable, id: string): Promise<FleetRecord> {
  return toFleet((await db.query(plannedOnce('SELECT * FROM fleets WHERE id = $1'), [id]))[0]);
}

export async function listFleets(db: Queryable, projectId: string, includeEnded: boolean): Promise<FleetRecord[]> {
  const rows = await db.query(
    `SELECT * FROM fleets WHERE project_id = $1 AND ($2 OR status NOT IN ('terminated', 'failed')) ORDER BY created_at`,
    [projectId, includeEnded]);
  return rows.map(toFleet);
}

export async function listActiveFleets(db: Queryable, projectId: string): Promise<FleetRecord[]> {
  const rows = await db.query(`SELECT * FROM fleets WHERE project_id = $1 AND status = 'active' ORDER BY created_at`, [projectId]);
  return rows.map(toFleet);
}

/**
 * Inserts a new fleet, or bumps the generation of the live one with that name when its spec changed. A fleet being
 * deleted is left as it is (`deleting`): it cannot come back, and a new one takes its name once it is gone.
 */
export async function applyFleet(db: Queryable, projectId: string, desired: FleetDesired): Promise<{ fleet: FleetRecord; created: boolean; changed: boolean; deleting: boolean }> {
  const existing = await getLiveFleet(db, projectId, desired.name);
  if (existing?.deleted) return { fleet: existing, created: false, changed: false, deleting: true };
  const target = desired.nodesTarget ?? desired.nodesMin;
  const values = [desired.spec, desired.requirement, desired.nodesMin, desired.nodesMax,
    desired.idleSeconds, desired.backends, target, target > desired.nodesMin ? target : null];
  if (!existing) {
    const rows = await db.query(
      `INSERT INTO fleets (id, project_id, name, spec, requirement, nodes_min, nodes_max, idle_seconds, backends, nodes_target, provision_target, status)
       VALUES ($9, $10, $11, $1::jsonb, $2::jsonb, $3, $4, $5, $6::jsonb, $7, $8, 'active') RETURNING *`,
      [...values, randomUUID(), projectId, desired.name]);
    return { fleet: toFleet(rows[0]), created: true, changed: true, deleting: false };
  }
  if (isDeepStrictEqual(existing.spec, desired.spec)) {
    const [row] = await db.query(`UPDATE fleets SET applied_at = now(), next_reconcile_at = now() WHERE id = $1 RETURNING *`, [existing.id]);
    return { fleet: toFleet(row), created: false, changed: false, deleting: false };
  }
  const rows = await db.query(
    `UPDATE fleets SET spec = $1::jsonb, requirement = $2::jsonb, nodes_min = $3, nodes_max = $4, idle_seconds = $5,
       backends = $6::jsonb, nodes_target = $7, provision_target = $8,
       generation = generation + 1, updated_at = now(), applied_at = now(), next_reconcile_at = now()
     WHERE id = $9 RETURNING *`,
    [...values, existing.id]);
  return { fleet: toFleet(rows[0]), created: false, changed: true, deleting: false };
}

/** Whether the fleet's instances must share one network with a fast interconnect (`placement: cluster`). */
export function isClusterFleet(fleet: Pick<FleetRecord, 'spec'>): boolean {
  return fleet.spec.placement === 'cluster';
}

/** Records the fleet's cluster unless another server's instance recorded one first; returns the one that holds. */
export async function recordFleetCluster(db: Queryable, fleetId: string, cluster: FleetCluster): Promise<FleetCluster> {
  const rows = await db.query<{ cluster: FleetCluster }>(
    `UPDATE fleets SET cluster = coalesce(cluster, $2::jsonb), updated_at = now() WHERE id = $1 RETURNING cluster`, [fleetId, cluster]);
  return rows[0]!.cluster;
}

/** The fleet has reached the target apply set for generation `generation`; from now on it keeps nodes.min. */
export async function provisionTargetReached(db: Queryable, fleetId: string, generation: number): Promise<void> {
  await db.query('UPDATE fleets SET provision_target = NULL WHERE id = $1 AND generation = $2', [fleetId, generation]);
}

export async function forgetFleetCluster(db: Queryable, fleetId: string): Promise<void> {
  await db.query('UPDATE fleets SET cluster = NULL, updated_at = now() WHERE id = $1', [fleetId]);
}

export async function requestFleetDeletion(db: Queryable, fleetId: string): Promise<void> {
  await db.query(
    `UPDATE fleets SET deleted = true, status = 'terminating', updated_at = now(), next_reconcile_at = now()
     WHERE id = $1 AND status = 'active'`, [fleetId]);
}

export async function setFleetStatus(db: Queryable, fleetId: string, owner: string, status: FleetStatus, message: string): Promise<boolean> {
  const rows = await db.query(
    `UPDATE fleets SET status = $3, status_message = $4, updated_at = now() WHERE id = $1 AND lease_owner = $2 RETURNING id`,
    [fleetId, owner, status, message]);
  return rows.length > 0;
}
