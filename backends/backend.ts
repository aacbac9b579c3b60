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
