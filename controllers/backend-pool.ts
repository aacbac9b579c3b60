import { join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { formatDuration } from '../api/duration.js';
import type { BackendOffersState, BackendType, Offer, OfferListing } from '../api/offer.js';
import { BackendAuthError, type Backend } from '../backends/backend.js';
import { createBackend } from '../backends/registry.js';
import type { HostKeyBook } from '../backends/ssh/connection.js';
import { SshHostBackend } from '../backends/ssh/ssh.js';
import type { Queryable } from '../store/db.js';
import type { InstanceRecord } from '../store/instances.js';
import { getProjectById } from '../store/projects.js';
import { knownHostKey, recordHostKey } from '../store/ssh-host-keys.js';
import type { BackendConfig } from '../backends/config.js';

export type { OfferListing };

interface CachedOffers {
  offers: Offer[] | null;
  fetchedAt: number | null;
  /** Why the last refresh failed; cleared by the next one that succeeds. */
  error: string | null;
  /** What the user can do about that failure, when there is something. */
  fix: string | null;
  attemptedAt: number;
  refreshing: Promise<void> | null;
}

export interface ListingOptions {
  /** Wait a little for a refresh of offers older than the TTL before answering with them: a person is waiting for the answer. */
  fresh?: boolean;
}

const FRESH_WAIT_MS = 5000;

/** A key the cloud refused is most often the one a restarted emulator no longer takes: it made a new one. */
const REFUSED_KEY_FIX = "paste the key the cloud takes now (a gpucloud emulator prints a new one each time it starts) into the server's config.yml and restart the server";

/** The backends each project's config names, built once, with a short-lived cache of their offers. */
export class BackendPool {
  private readonly backends = new Map<string, { config: BackendConfig[]; byType: Map<BackendType, Backend> }>();
  private readonly offerCache = new Map<string, CachedOffers>();
  /** Each host of an SSH fleet is a backend of its own instance, holding that host's SSH connection and agent tunnel. */
  private readonly hosts = new Map<string, SshHostBackend>();

  constructor(
    private readonly db: Queryable,
    private readonly stateDir: string,
    private readonly offersTtlMs = 3000,
  ) {}

  async forProject(projectId: string): Promise<Map<BackendType, Backend>> {
    const project = await getProjectById(this.db, projectId);
    const cached = this.backends.get(projectId);
    if (cached && isDeepStrictEqual(cached.config, project.backends)) return cached.byType;
    const byType = new Map<BackendType, Backend>();
    for (const config of project.backends) byType.set(config.type, createBackend(config, { stateDir: this.stateDir }));
    this.backends.set(projectId, { config: project.backends, byType });
    this.forgetOffers(projectId);
    // Calls already under way may still use the old drivers for a moment; what they hold is released after.
    if (cached) void closeAll(cached.byType).catch(() => undefined);
    return byType;
  }

  async backend(projectId: string, type: string): Promise<Backend | null> {
    return (await this.forProject(projectId)).get(type as BackendType) ?? null;
  }

  /** The backend an instance is made and reached with: its SSH host's own, or the project's backend of its type. */
  async backendOf(instance: Pick<InstanceRecord, 'id' | 'projectId' | 'fleetId' | 'backend' | 'sshHost'>): Promise<Backend | null> {
    if (!instance.sshHost) return this.backend(instance.projectId, instance.backend);
    let host = this.hosts.get(instance.id);
    if (!host) {
      host = new SshHostBackend({ host: instance.sshHost, keys: hostKeyBook(this.db, instance.fleetId), fleetId: instance.fleetId, stateDir: join(this.stateDir, 'ssh') });
      this.hosts.set(instance.id, host);
    }
    return host;
  }

  /** Lets go of an ended instance's SSH connection and tunnel. */
  async releaseHost(instanceId: string): Promise<void> {
    const host = this.hosts.get(instanceId);
    this.hosts.delete(instanceId);
    await host?.close();
  }

  /** Offers of the named backends (all the project's when `types` is undefined), cheapest first, with how old they are. */
  async offers(projectId: string, types?: readonly string[], options: ListingOptions = {}): Promise<OfferListing> {
    const backends = await this.forProject(projectId);
    const listing: OfferListing = { offers: [], backends: [], errors: [] };
    for (const [type, backend] of backends) {
      if (types && !types.includes(type)) continue;
      const cached = await this.cachedOffers(`${projectId}/${type}`, backend, options.fresh ? FRESH_WAIT_MS : 0);
      const state = backendState(type, cached);
      listing.backends.push(state);
      listing.offers.push(...cached.offers ?? []);
      if (state.error !== null) listing.errors.push(describeFailure(state, cached.fix));
    }
    // An SSH fleet's instances are its hosts, none of them offered: it never provisions more.
    const missing = (types ?? []).filter((t) => t !== 'ssh' && !backends.has(t as BackendType));
    for (const type of missing) {
      const configured = [...backends.keys()].join(', ') || 'none';
      const error = `not configured for this project; configured: ${configured} (see the server's config.yml)`;
      const state: BackendOffersState = { backend: type, fetchedAt: null, ageSeconds: null, error };
      listing.backends.push(state);
      listing.errors.push(describeFailure(state));
    }
    listing.offers.sort((a, b) => a.pricePerHour - b.pricePerHour);
    return listing;
  }

  /**
   * Offers younger than the TTL are served from memory. Older ones are still served (scheduling
   * never waits on a cloud API) while one refresh runs; only a backend's first listing is awaited.
   * A failed refresh is remembered and reported until one succeeds, and retried once per TTL.
   */
  private async cachedOffers(key: string, backend: Backend, refreshWaitMs: number): Promise<CachedOffers> {
    let cached = this.offerCache.get(key);
    if (!cached) {
      cached = { offers: null, fetchedAt: null, error: null, fix: null, attemptedAt: 0, refreshing: null };
      this.offerCache.set(key, cached);
    }
    if (!cached.refreshing && Date.now() - cached.attemptedAt >= this.offersTtlMs) cached.refreshing = refresh(cached, backend);
    const neverAnswered = cached.offers === null && cached.error === null;
    if (cached.refreshing && neverAnswered) await cached.refreshing;
    else if (cached.refreshing && refreshWaitMs > 0) await settledWithin(cached.refreshing, refreshWaitMs);
    return cached;
  }

  async close(): Promise<void> {
    for (const { byType } of this.backends.values()) await closeAll(byType);
    this.backends.clear();
    await Promise.all([...this.hosts.keys()].map((id) => this.releaseHost(id)));
  }

  /** After a capacity error the cached availability is stale. */
  forgetOffers(projectId: string): void {
    for (const key of this.offerCache.keys()) if (key.startsWith(`${projectId}/`)) this.offerCache.delete(key);
  }
}

function hostKeyBook(db: Queryable, fleetId: string): HostKeyBook {
  return {
    known: (address) => knownHostKey(db, fleetId, address),
    record: (address, publicKey) => recordHostKey(db, fleetId, address, publicKey),
  };
}

async function closeAll(backends: Map<BackendType, Backend>): Promise<void> {
  await Promise.all([...backends.values()].map((backend) => backend.close?.()));
}

function refresh(cached: CachedOffers, backend: Backend): Promise<void> {
  cached.attemptedAt = Date.now();
  return backend.offers().then(
    (offers) => {
      cached.offers = offers;
      cached.fetchedAt = Date.now();
      cached.error = null;
      cached.fix = null;
    },
    (error: unknown) => {
      cached.error = (error as Error).message;
      cached.fix = error instanceof BackendAuthError ? REFUSED_KEY_FIX : null;
    },
  ).finally(() => { cached.refreshing = null; });
}

function settledWithin(work: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => { timer = setTimeout(resolve, ms); });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

function backendState(type: string, cached: CachedOffers): BackendOffersState {
  return {
    backend: type,
    fetchedAt: cached.fetchedAt === null ? null : new Date(cached.fetchedAt).toISOString(),
    ageSeconds: cached.fetchedAt === null ? null : Math.floor((Date.now() - cached.fetchedAt) / 1000),
    error: cached.error,
  };
}

/** `gpucloud: invalid gpucloud API key (offers shown are 5m old); paste the key ...`. */
function describeFailure(state: BackendOffersState, fix: string | null = null): string {
  const then = fix === null ? '' : `; ${fix}`;
  if (state.ageSeconds === null) return `${state.backend}: ${state.error}${then}`;
  const age = state.ageSeconds < 60 ? state.ageSeconds : state.ageSeconds - (state.ageSeconds % 60);
  return `${state.backend}: ${state.error} (offers shown are ${formatDuration(age)} old)${then}`;
}
