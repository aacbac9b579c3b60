import { isDeepStrictEqual } from 'node:util';
import type { BackendType, Offer } from '../api/offer.js';
import type { Backend } from '../backends/backend.js';
import { createBackend } from '../backends/registry.js';
import type { Queryable } from '../store/db.js';
import { getProjectById } from '../store/projects.js';
import type { BackendConfig } from '../backends/config.js';

export interface OfferListing {
  offers: Offer[];
  /** Backends that could not be asked, with why (an invalid key, an outage). */
  errors: string[];
}

interface CachedOffers {
  at: number;
  offers?: Offer[];
  refreshing?: Promise<Offer[]>;
}

/** The backends each project's config names, built once, with a short-lived cache of their offers. */
export class BackendPool {
  private readonly backends = new Map<string, { config: BackendConfig[]; byType: Map<BackendType, Backend> }>();
  private readonly offerCache = new Map<string, CachedOffers>();

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
    return byType;
  }

  async backend(projectId: string, type: string): Promise<Backend | null> {
    return (await this.forProject(projectId)).get(type as BackendType) ?? null;
  }

  /** Offers of the named backends (all the project's when `types` is undefined), cheapest first. */
  async offers(projectId: string, types?: readonly string[]): Promise<OfferListing> {
    const backends = await this.forProject(projectId);
    const listing: OfferListing = { offers: [], errors: [] };
    for (const [type, backend] of backends) {
      if (types && !types.includes(type)) continue;
      try {
        listing.offers.push(...await this.cachedOffers(`${projectId}/${type}`, backend));
      } catch (error) {
        listing.errors.push(`${type}: ${(error as Error).message}`);
      }
    }
    const missing = (types ?? []).filter((t) => !backends.has(t as BackendType));
    for (const type of missing) listing.errors.push(`${type}: not configured for this project`);
    listing.offers.sort((a, b) => a.pricePerHour - b.pricePerHour);
    return listing;
  }

  /**
   * Offers younger than the TTL are served from memory. Older ones are still served (scheduling
   * never waits on a cloud API) while one refresh runs; only the first listing is awaited.
   */
  private cachedOffers(key: string, backend: Backend): Promise<Offer[]> {
    const cached = this.offerCache.get(key);
    if (cached?.offers && Date.now() - cached.at < this.offersTtlMs) return Promise.resolve(cached.offers);
    if (!cached?.refreshing) {
      const refreshing = backend.offers().then(
        (offers) => {
          this.offerCache.set(key, { at: Date.now(), offers });
          return offers;
        },
        (error: unknown) => {
          const entry = this.offerCache.get(key);
          if (entry) entry.refreshing = undefined;
          throw error;
        });
      refreshing.catch(() => {});
      this.offerCache.set(key, { at: cached?.at ?? 0, offers: cached?.offers, refreshing });
    }
    const entry = this.offerCache.get(key)!;
    return entry.offers ? Promise.resolve(entry.offers) : entry.refreshing!;
  }

  /** After a capacity error the cached availability is stale. */
  forgetOffers(projectId: string): void {
    for (const key of this.offerCache.keys()) if (key.startsWith(`${projectId}/`)) this.offerCache.delete(key);
  }
}
