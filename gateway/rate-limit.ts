import type { IncomingMessage } from 'node:http';
import type { RateLimitRoute, ServiceRoute } from '../api/services.js';
import { GatewayError } from './errors.js';

interface Bucket {
  tokens: number;
  at: number;
  limit: RateLimitRoute;
}

/** How often buckets that have filled up again are forgotten (a full bucket and no bucket mean the same). */
const SWEEP_MS = 60_000;

/**
 * The services' `rate_limits`: a token bucket per limit and key (the client's address, or a header's value) that
 * holds `burst + 1` tokens and refills at `rps`; a request that finds it empty gets 429 with Retry-After.
 * Buckets live in the process that proxies: each server and each gateway process counts its own requests.
 */
export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private sweptAt = Date.now();

  /** Takes a token for the request to `servicePath` (under the service's address); throws the 429 when its bucket is empty. */
  admit(route: ServiceRoute, servicePath: string, req: IncomingMessage): void {
    const index = route.rateLimits.findIndex((limit) => servicePath.startsWith(limit.prefix));
    if (index === -1) return;
    const limit = route.rateLimits[index]!;
    const key = limit.key === 'ip' ? req.socket.remoteAddress ?? '' : String(req.headers[limit.header!] ?? '');
    const now = Date.now();
    if (now - this.sweptAt > SWEEP_MS) this.sweep(now);
    const id = `${route.runId}\n${index}\n${key}`;
    const bucket = this.buckets.get(id) ?? { tokens: limit.burst + 1, at: now, limit };
    bucket.tokens = Math.min(limit.burst + 1, bucket.tokens + ((now - bucket.at) / 1000) * limit.rps);
    bucket.at = now;
    bucket.limit = limit;
    this.buckets.set(id, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return;
    }
    const seconds = Math.max(1, Math.ceil((1 - bucket.tokens) / limit.rps));
    const per = limit.key === 'ip' ? 'client address' : `value of ${limit.header}`;
    throw new GatewayError(429, 'rate_limited', `over the limit of ${limit.rps} requests per second per ${per} on ${limit.prefix}; retry in ${seconds} s`,
      { 'Retry-After': String(seconds) });
  }

  private sweep(now: number): void {
    this.sweptAt = now;
    for (const [id, bucket] of this.buckets) {
      if (bucket.tokens + ((now - bucket.at) / 1000) * bucket.limit.rps >= bucket.limit.burst + 1) this.buckets.delete(id);
    }
  }
}
