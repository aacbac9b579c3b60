import type { KubeConfig, KubernetesObject, ListWatch, V1Namespace } from '@kubernetes/client-node';
import type { Logger } from 'winston';
import { PROJECT_LABEL } from '../../api/kubernetes.js';
import { SPEC_TYPES, type SpecType } from '../../api/spec.js';
import { CHANNELS } from '../../store/channels.js';
import type { Db } from '../../store/db.js';
import { createUser, getUser } from '../../store/projects.js';
import { statusCodeOf } from '../../backends/kubernetes/api-configuration.js';
import { Cluster, type CustomResource } from './cluster.js';
import { Reconciler, StaleObject } from './reconcile.js';

/** The user that runs applied from custom resources are submitted as; it has no token anyone knows. */
export const KUBERNETES_USER = 'kubernetes';

const MAX_CONCURRENT_RECONCILES = 4;
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 30_000;
/** A watch is cheap to try again, and a server that is back should be heard from soon. */
const WATCH_RETRY_MAX_MS = 5000;
const STALE_RETRIES = 3;

export interface KubernetesSourceOptions {
  config: KubeConfig;
  /** The namespaces whose objects are applied; null for every namespace. */
  namespaces: string[] | null;
  /** The project of a namespace without the orchestrator.dev/project label or annotation. */
  defaultProject: string;
  /** Everything is looked at again this often, whether or not a watch or a NOTIFY said it changed. */
  resyncMs: number;
  /** config.yml's server_url, which makes a service's `status.serviceUrl` a whole URL rather than a path. */
  serverUrl: string | null;
}

interface Watched {
  type: SpecType;
  informer: ListWatch<CustomResource>;
}

const keyOf = (type: SpecType, namespace: string, name: string) => `${type}/${namespace}/${name}`;

/**
 * The Kubernetes source controller: list+watches the four kinds of custom resources in the namespaces it is given
 * and applies each one (`Reconciler`), on a watch event, on a NOTIFY that runs or fleets changed, and every few
 * seconds. Each object is reconciled by one task at a time here; other servers doing the same agree through the
 * API server's resourceVersions and the database.
 */
export class KubernetesSource {
  private readonly cluster: Cluster;
  private readonly watched: Watched[] = [];
  private namespaces: ListWatch<V1Namespace> | null = null;
  private reconciler: Reconciler | null = null;
  private readonly queue = new Set<string>();
  private readonly busy = new Set<string>();
  private readonly failures = new Map<string, number>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly unlisteners: Array<() => Promise<void>> = [];
  private readonly idle = new Set<() => void>();
  private running = false;
  /** Whether the namespaces have been listed: until then no object's project is known. */
  private namespacesListed = false;

  constructor(private readonly db: Db, private readonly logger: Logger, private readonly options: KubernetesSourceOptions) {
    this.cluster = new Cluster(options.config);
  }

  async start(): Promise<void> {
    this.running = true;
    const user = (await createUser(this.db, KUBERNETES_USER, 'user'))?.user ?? await getUser(this.db, KUBERNETES_USER);
    if (!user) throw new Error(`cannot create the ${KUBERNETES_USER} user that custom resources are applied as`);
    this.reconciler = new Reconciler(this.db, this.cluster, user.id, this.logger, this.options.serverUrl);
    const namespaces = this.watching('namespaces', (onWatching) => this.cluster.namespaceInformer(() => {
      onWatching();
      this.namespacesListed = true;
      this.drain();
    }));
    namespaces.on('change', (namespace) => this.enqueueNamespace(namespace.metadata?.name ?? ''));
    this.namespaces = namespaces;
    for (const type of SPEC_TYPES) {
      for (const namespace of this.options.namespaces ?? [null]) {
        const informer = this.watching(`${type}s${namespace === null ? '' : ` in ${namespace}`}`, (onWatching) => this.cluster.informer(type, namespace, onWatching));
        informer.on('change', (object) => this.enqueue(keyOf(type, object.metadata.namespace, object.metadata.name)));
        this.watched.push({ type, informer });
      }
    }
    for (const channel of [CHANNELS.runs, CHANNELS.fleets, CHANNELS.instances]) {
      this.unlisteners.push(await this.db.listen(channel, () => this.enqueueAll()));
    }
    const resync = setInterval(() => this.enqueueAll(), this.options.resyncMs);
    this.timers.add(resync);
    const where = this.options.namespaces ? `namespaces ${this.options.namespaces.join(', ')}` : 'every namespace';
    this.logger.info(`kubernetes: applying the custom resources of ${where} from ${this.options.config.getCurrentCluster()?.server}`);
  }

  async stop(): Promise<void> {
    this.running = false;
    for (const timer of this.timers) clearTimeout(timer);
    for (const unlisten of this.unlisteners) await unlisten().catch(() => {});
    await Promise.all([this.namespaces, ...this.watched.map((w) => w.informer)].map((informer) => informer?.stop()));
    this.queue.clear();
    if (this.busy.size > 0) await new Promise<void>((resolve) => this.idle.add(resolve));
  }

  /** Starts an informer, and starts it again after each failure (the API server away, a list refused), more slowly each time. */
  private watching<T extends KubernetesObject>(what: string, make: (onWatching: () => void) => ListWatch<T>): ListWatch<T> {
    let failures = 0;
    const informer = make(() => {
      if (failures > 0) this.logger.info(`kubernetes: watching ${what} again`);
      failures = 0;
    });
    informer.on('error', (error) => {
      if (!this.running) return;
      if (failures === 0) this.logger.warn(`kubernetes: the watch of ${what} stopped (${(error as Error)?.message ?? error}); retrying`);
      failures += 1;
      this.later(() => void informer.start().catch(() => {}), Math.min(WATCH_RETRY_MAX_MS, RETRY_MIN_MS * 2 ** (failures - 1)));
    });
    informer.start().catch(() => {});
    return informer;
  }

  private later(fn: () => void, ms: number): void {
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (this.running) fn();
    }, ms);
    this.timers.add(timer);
  }

  private projectOf(namespace: string): string {
    const metadata = this.namespaces?.get(namespace)?.metadata;
    return metadata?.labels?.[PROJECT_LABEL] ?? metadata?.annotations?.[PROJECT_LABEL] ?? this.options.defaultProject;
  }

  private enqueueNamespace(namespace: string): void {
    for (const { type, informer } of this.watched) {
      for (const object of informer.list(namespace)) this.enqueue(keyOf(type, namespace, object.metadata.name));
    }
  }

  private enqueueAll(): void {
    for (const { type, informer } of this.watched) {
      for (const object of informer.list()) this.enqueue(keyOf(type, object.metadata.namespace, object.metadata.name));
    }
  }

  private enqueue(key: string): void {
    if (!this.running) return;
    this.queue.add(key);
    this.drain();
  }

  /** Starts queued reconciles, at most a few at once and one per object; an object changed meanwhile is queued again. */
  private drain(): void {
    if (!this.namespacesListed) return;
    for (const key of this.queue) {
      if (this.busy.size >= MAX_CONCURRENT_RECONCILES) return;
      if (this.busy.has(key)) continue;
      this.queue.delete(key);
      this.busy.add(key);
      void this.reconcileKey(key).finally(() => {
        this.busy.delete(key);
        if (this.busy.size === 0) for (const resolve of this.idle) resolve();
        this.drain();
      });
    }
  }

  private cached(type: SpecType, namespace: string, name: string): CustomResource | undefined {
    for (const { type: watchedType, informer } of this.watched) {
      const object = watchedType === type ? informer.get(name, namespace) : undefined;
      if (object) return object;
    }
    return undefined;
  }

  private async reconcileKey(key: string): Promise<void> {
    const [type, namespace, name] = key.split('/') as [SpecType, string, string];
    let object = this.cached(type, namespace, name);
    try {
      for (let attempt = 0; object; attempt++) {
        try {
          await this.reconciler!.reconcile(type, object, this.projectOf(namespace));
          break;
        } catch (error) {
          const stale = error instanceof StaleObject || statusCodeOf(error) === 409 || statusCodeOf(error) === 422;
          if (!stale || attempt >= STALE_RETRIES) throw error;
          object = (await this.cluster.get(type, namespace, name)) ?? undefined;
        }
      }
      this.failures.delete(key);
    } catch (error) {
      const failures = (this.failures.get(key) ?? 0) + 1;
      this.failures.set(key, failures);
      if (!this.running) return;
      this.logger.warn(`kubernetes: ${type} ${namespace}/${name}: ${(error as Error).message}; trying again`);
      this.later(() => this.enqueue(key), Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** (failures - 1)));
    }
  }
}
