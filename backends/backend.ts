import type { BackendType, Offer } from '../api/offer.js';

export interface CreateInstanceRequest {
  offer: Offer;
  /** Stable key (the instance record's id): a second create with the same key returns the first instance. */
  idempotencyKey: string;
  name: string;
  /** Token the instance's agent will demand on every call. */
  agentToken: string;
  /** The size of /dev/shm the fleet or run asks for (shm_size), for backends that set it per instance. */
  shmSizeMib?: number;
  /** The cluster (createCluster's) to create it in: its offer must be of the cluster's region and GPU model. */
  clusterId?: string;
}

/** Machines on one network with a fast interconnect, in one region, for a fleet with `placement: cluster`. */
export interface CreateClusterRequest {
  /** Any offer of the model and region the cluster is for. */
  offer: Offer;
  /** Stable key (the fleet's id): a second create with the same key returns the first cluster. */
  idempotencyKey: string;
  name: string;
  /** How many machines it must be able to hold; null: as many as its region holds. */
  size: number | null;
}

export interface BackendCluster {
  id: string;
  region: string;
}

export type BackendInstanceStatus = 'provisioning' | 'running' | 'terminated' | 'failed';

export interface BackendInstance {
  id: string;
  idempotencyKey: string;
  status: BackendInstanceStatus;
  /** Base URL of the agent once the instance is running, e.g. http://127.0.0.1:41234 */
  agentUrl: string | null;
  region: string;
  reason?: string;
  /** The backend took a spot instance back: it is terminated (or about to be) through no fault of its own. */
  interrupted?: boolean;
  /** The machine as the backend found it, where it learns that only once it has one (an SSH host's GPUs). */
  offer?: Offer;
  /** The address the fleet's other instances reach this one at, where it is not the agent's (an SSH host behind a tunnel). */
  internalIp?: string;
}

export interface Backend {
  readonly type: BackendType;
  offers(): Promise<Offer[]>;
  create(request: CreateInstanceRequest): Promise<BackendInstance>;
  /** An instance the backend no longer knows is reported as terminated, not thrown. */
  get(id: string): Promise<BackendInstance>;
  list(): Promise<BackendInstance[]>;
  /** Idempotent: terminating a gone instance succeeds. */
  terminate(id: string): Promise<void>;
  /**
   * Backends whose instances may land in different networks place a cluster fleet's instances in one; those
   * without it (local: one machine; kubernetes: one cluster's network) need nothing. Throws NoCapacityError
   * when the offer's region cannot take the cluster now, BackendError when no region of its kind could.
   */
  createCluster?(request: CreateClusterRequest): Promise<BackendCluster>;
  /** Idempotent: deleting a gone cluster succeeds. */
  deleteCluster?(id: string): Promise<void>;
  /** Releases what the driver holds in this process (listening sockets); its instances run on. */
  close?(): Promise<void>;
}

export class BackendError extends Error {
  constructor(message: string, readonly retryable = false) {
    super(message);
    this.name = 'BackendError';
  }
}

/** The chosen offer has no capacity now: the caller moves on to the next offer. */
export class NoCapacityError extends BackendError {
  constructor(message: string) {
    super(message, true);
    this.name = 'NoCapacityError';
  }
}

export class BackendAuthError extends BackendError {
  constructor(message: string) {
    super(message, false);
    this.name = 'BackendAuthError';
  }
}
