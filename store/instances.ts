import { randomBytes, randomUUID } from 'node:crypto';
import type { Instance } from '../api/objects.js';
import type { Offer } from '../api/offer.js';
import type { SshHost } from '../api/ssh-fleet.js';
import type { ResourceRequirement } from '../api/resources.js';
import type { InstanceStatus, InstanceTerminationReason } from '../api/status.js';
import type { Queryable, Row } from './db.js';
import { updateLeased } from './leases.js';

export interface InstanceRecord {
  id: string;
  projectId: string;
  fleetId: string;
  name: string;
  backend: string;
  requirement: ResourceRequirement;
  offer: Offer | null;
  backendInstanceId: string | null;
  agentUrl: string | null;
  agentToken: string;
  status: InstanceStatus;
  statusMessage: string;
  terminationReason: InstanceTerminationReason | null;
  runId: string | null;
  idleSince: Date | null;
  provisioningStartedAt: Date | null;
  unreachableSince: Date | null;
  /** The agent's SSH host key as it reports it, in OpenSSH's one-line form; null until it does. */
  sshHostKey: string | null;
  /** The host of an SSH fleet this instance is, as the fleet named it when the instance was made; null for other backends. */
  sshHost: SshHost | null;
  /** The address the fleet's other instances reach this one at, where it differs from the agent's (an SSH host's, reached through a tunnel). */
  internalIp: string | null;
  createdAt: Date;
  terminatedAt: Date | null;
}

export const toInstance = (r: Row): InstanceRecord => ({
  id: r.id, projectId: r.project_id, fleetId: r.fleet_id, name: r.name, backend: r.backend, requirement: r.requirement,
  offer: r.offer, backendInstanceId: r.backend_instance_id, agentUrl: r.agent_url, agentToken: r.agent_token,
  status: r.status, statusMessage: r.status_message, terminationReason: r.termination_reason, runId: r.run_id,
  idleSince: r.idle_since, provisioningStartedAt: r.provisioning_started_at, unreachableSince: r.unreachable_since,
  sshHostKey: r.ssh_host_key, sshHost: r.ssh_host ?? null, internalIp: r.internal_ip ?? null, createdAt: r.created_at, terminatedAt: r.terminated_at,
});

export function instanceView(i: InstanceRecord, fleetName: string, runName: string | null): Instance {
  return {
    id: i.id, name: i.name, fleet: fleetName, backend: i.backend, status: i.status, statusMessage: i.statusMessage,
    terminationReason: i.terminationReason, gpu: i.offer?.gpu ?? null, region: i.offer?.region ?? null,
    pricePerHour: i.offer?.pricePerHour ?? null, host: i.sshHost?.name ?? null, run: runName, idleSince: i.idleSince?.toISOString() ?? null,
    createdAt: i.createdAt.toISOString(), terminatedAt: i.terminatedAt?.toISOString() ?? null,
  };
}

export interface NewInstance {
  projectId: string;
  fleetId: string;
  fleetName: string;
  backend: string;
  requirement: ResourceRequirement;
  runId: string | null;
  sshHost?: SshHost;
}

/** A pending instance: the instance controller provisions it. A run that reserves it owns it from the start. */
export async function insertInstance(db: Queryable, n: NewInstance): Promise<InstanceRecord> {
  const id = randomUUID();
  const [{ count }] = await db.query<{ count: number }>('SELECT count(*)::int AS count FROM instances WHERE fleet_id = $1', [n.fleetId]);
  const rows = await db.query(
    `INSERT INTO instances (id, project_id, fleet_id, name, backend, requirement, agent_token, status, run_id, ssh_host)
     VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9::jsonb) RETURNING *`,
    [id, n.projectId, n.fleetId, `${n.fleetName}-${count}`, n.backend, n.requirement, randomBytes(24).toString('base64url'), n.runId, n.sshHost ?? null]);
  return toInstance(rows[0]);
}

export async function getInstance(db: Queryable, id: string): Promise<InstanceRecord | null> {
  const rows = await db.query('SELECT * FROM instances WHERE id = $1', [id]);
  return rows[0] ? toInstance(rows[0]) : null;
}

export async function listFleetInstances(db: Queryable, fleetId: string): Promise<InstanceRecord[]> {
  return (await db.query(`SELECT * FROM instances WHERE fleet_id = $1 AND status <> 'terminated' ORDER BY created_at`, [fleetId])).map(toInstance);
}

export async function listInstanceViews(db: Queryable, projectId: string, options: { fleetId?: string; includeTerminated: boolean }): Promise<Instance[]> {
  const rows = await db.query(
    `SELECT i.*, f.name AS fleet_name, r.name AS run_name FROM instances i
     JOIN fleets f ON f.id = i.fleet_id LEFT JOIN runs r ON r.id = i.run_id
     WHERE i.project_id = $1 AND ($2::text IS NULL OR i.fleet_id = $2) AND ($3 OR i.status <> 'terminated')
     ORDER BY i.created_at`,
    [projectId, options.fleetId ?? null, options.includeTerminated]);
  return rows.map((r) => instanceView(toInstance(r), r.fleet_name, r.run_name));
}

type InstanceColumn = 'status' | 'status_message' | 'termination_reason' | 'offer' | 'backend_instance_id' | 'agent_url'
  | 'run_id' | 'idle_since' | 'provisioning_started_at' | 'unreachable_since' | 'terminated_at' | 'ssh_host_key' | 'internal_ip';

/** Writes the changes only while `owner` still holds the instance's lease; false when it lost it. */
export function updateInstance(db: Queryable, id: string, owner: string, patch: Partial<Record<InstanceColumn, unknown>>): Promise<boolean> {
  return updateLeased<InstanceColumn>(db, 'instances', id, owner, patch);
}

/** A busy instance goes back to idle once its run let go of it; only the run that holds it may free it. */
export async function releaseInstanceFromRun(db: Queryable, instanceId: string, runId: string): Promise<boolean> {
  const rows = await db.query(
    `UPDATE instances SET run_id = NULL, status = CASE WHEN status = 'busy' THEN 'idle' ELSE status END,
       idle_since = now(), updated_at = now()
     WHERE id = $1 AND run_id = $2 RETURNING id`, [instanceId, runId]);
  return rows.length > 0;
}
