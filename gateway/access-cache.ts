import type { Logger } from 'winston';
import type { Role } from '../api/objects.js';
import type { Db } from '../store/db.js';
import { hashToken, projectRole, userByToken, type UserRecord } from '../store/projects.js';
import { userBySession } from '../store/sessions.js';
import type { CallerAccess } from './access.js';
import { then, type MaybePromise } from './maybe-async.js';

/** NOTIFY on it after any change to users, their tokens or memberships: every gateway forgets what it knew. */
export const AUTH_CHANNEL = 'orchestrator_auth';

/** How long a gateway trusts what it read, should a NOTIFY be lost. */
export const ACCESS_CACHE_TTL_MS = 5000;

interface Entry<T> {
  value: Promise<T>;
  /** The answer once it came: later requests take it without waiting on the promise. */
  settled?: { value: T };
  expiresAt: number;
}

/** The caches of this process, per database: a change made here is forgotten at once, before its NOTIFY travels. */
const cachesOf = new WeakMap<Db, Set<AccessCache>>();

/**
 * Says that users, tokens or memberships changed: the gateways of this process forget at once, those of other
 * servers on the same database when the NOTIFY reaches them. Call it after the change is committed.
 */
export async function accessChanged(db: Db, logger: Logger): Promise<void> {
  for (const cache of cachesOf.get(db) ?? []) cache.clear();
  await db.notify(AUTH_CHANNEL).catch((error: Error) => logger.warn(`NOTIFY ${AUTH_CHANNEL} failed; other servers may admit by the old access for up to ${ACCESS_CACHE_TTL_MS / 1000} s: ${error.message}`));
}

/**
 * The gateway's memory of who a token is and which role a user has in a project, so that a proxied request
 * does not ask the database twice. Lookups are shared while they run; an unknown token is never remembered.
 */
export class AccessCache implements CallerAccess {
  private users = new Map<string, Entry<UserRecord | null>>();
  private roles = new Map<string, Entry<Role | null>>();
  private unlisten: (() => Promise<void>) | undefined;

  constructor(private readonly db: Db, private readonly ttlMs = ACCESS_CACHE_TTL_MS) {}

  async start(): Promise<void> {
    let caches = cachesOf.get(this.db);
    if (!caches) cachesOf.set(this.db, caches = new Set());
    caches.add(this);
    this.unlisten = await this.db.listen(AUTH_CHANNEL, () => this.clear());
  }

  async stop(): Promise<void> {
    cachesOf.get(this.db)?.delete(this);
    await this.unlisten?.().catch(() => {});
    this.unlisten = undefined;
  }

  /** Lookups still running when this is called are dropped with the rest: their answer may predate the change. */
  clear(): void {
    this.users = new Map();
    this.roles = new Map();
  }

  roleOf(token: string, projectId: string): MaybePromise<Role | null | undefined> {
    return then(this.user(token), (user) => (user ? this.role(projectId, user) : undefined));
  }

  /** Sessions are looked up each time: a sign-out takes effect at once, with no NOTIFY to wait for. */
  async roleOfSession(session: string, projectId: string): Promise<Role | null | undefined> {
    const user = await userBySession(this.db, session);
    return user ? this.role(projectId, user) : undefined;
  }

  user(token: string): MaybePromise<UserRecord | null> {
    return this.remembered(this.users, hashToken(token), () => userByToken(this.db, token), (user) => user !== null);
  }

  role(projectId: string, user: UserRecord): MaybePromise<Role | null> {
    return this.remembered(this.roles, `${projectId} ${user.id} ${user.globalRole}`, () => projectRole(this.db, projectId, user), () => true);
  }

  private remembered<T>(map: Map<string, Entry<T>>, key: string, read: () => Promise<T>, keep: (value: T) => boolean): MaybePromise<T> {
    const now = Date.now();
    const known = map.get(key);
    if (known && known.expiresAt > now) return known.settled ? known.settled.value : known.value;
    const entry: Entry<T> = { value: read(), expiresAt: now + this.ttlMs };
    map.set(key, entry);
    const forget = () => { if (map.get(key) === entry) map.delete(key); };
    entry.value.then((value) => {
      entry.settled = { value };
      if (!keep(value)) forget();
    }, forget);
    return entry.value;
  }
}
