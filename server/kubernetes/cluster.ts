import type { CoreV1Api, CustomObjectsApi, KubeConfig, KubernetesObject, ListWatch, V1Namespace, Watch } from '@kubernetes/client-node';
import { CRD_GROUP, CRD_NAMES, CRD_VERSION } from '../../api/crd.js';
import { configurationWithTimeout, statusCodeOf } from '../../backends/kubernetes/api-configuration.js';
import { kubernetesClient } from '../../backends/kubernetes/client.js';
import type { ResourceStatus } from '../../api/kubernetes.js';
import type { SpecType } from '../../api/spec.js';

/** A custom resource of one of the four kinds, as the API server holds it. */
export interface CustomResource extends KubernetesObject {
  metadata: NonNullable<KubernetesObject['metadata']> & { name: string; namespace: string; generation?: number; resourceVersion?: string; uid?: string };
  spec?: Record<string, unknown>;
  status?: ResourceStatus;
}

const FIELD_MANAGER = 'orchestrator';
/** A call that takes longer is abandoned (and tried again later), so an API server that stops answering never holds an object. */
const REQUEST_TIMEOUT_MS = 30_000;
/** The API server refuses longer event messages. */
const MAX_EVENT_MESSAGE = 1024;

/**
 * A watch that also asks for bookmarks, so that a watch resumed after a quiet spell starts from a recent
 * resourceVersion, and that says when the API server has accepted one (the informer's own `connect` comes before).
 */
function bookmarkingWatch(config: KubeConfig, onWatching: () => void): Watch {
  const watch = new (kubernetesClient().Watch)(config);
  const plainWatch = watch.watch.bind(watch);
  watch.watch = async (path, queryParams, callback, done) => {
    let ended = false;
    const controller = await plainWatch(path, { ...queryParams, allowWatchBookmarks: true }, callback, (error) => {
      ended = true;
      done(error);
    });
    if (!ended) onWatching();
    return controller;
  };
  return watch;
}

/** The calls the source controller makes: list+watch of the custom resources and namespaces, their status and finalizers. */
export class Cluster {
  private readonly objects: CustomObjectsApi;
  private readonly core: CoreV1Api;

  constructor(private readonly config: KubeConfig) {
    const configuration = configurationWithTimeout(config, REQUEST_TIMEOUT_MS);
    const { CoreV1Api, CustomObjectsApi } = kubernetesClient();
    this.objects = new CustomObjectsApi(configuration);
    this.core = new CoreV1Api(configuration);
  }

  /**
   * A list+watch of one kind in one namespace (or all of them): it lists, then watches from the list's
   * resourceVersion, and lists again when the API server answers 410 Gone. It stops on any other error;
   * `start()` resumes it.
   */
  informer(type: SpecType, namespace: string | null, onWatching: () => void): ListWatch<CustomResource> {
    const { plural } = CRD_NAMES[type];
    const base = `/apis/${CRD_GROUP}/${CRD_VERSION}`;
    const path = namespace === null ? `${base}/${plural}` : `${base}/namespaces/${namespace}/${plural}`;
    const list = () => namespace === null
      ? this.objects.listClusterCustomObject({ group: CRD_GROUP, version: CRD_VERSION, plural })
      : this.objects.listNamespacedCustomObject({ group: CRD_GROUP, version: CRD_VERSION, namespace, plural });
    return new (kubernetesClient().ListWatch<CustomResource>)(path, bookmarkingWatch(this.config, onWatching), list, false);
  }

  namespaceInformer(onWatching: () => void): ListWatch<V1Namespace> {
    return new (kubernetesClient().ListWatch<V1Namespace>)('/api/v1/namespaces', bookmarkingWatch(this.config, onWatching), () => this.core.listNamespace(), false);
  }

  /** The object as the API server has it now; null when it is gone. */
  async get(type: SpecType, namespace: string, name: string): Promise<CustomResource | null> {
    try {
      return await this.objects.getNamespacedCustomObject({ group: CRD_GROUP, version: CRD_VERSION, namespace, plural: CRD_NAMES[type].plural, name });
    } catch (error) {
      if (statusCodeOf(error) === 404) return null;
      throw error;
    }
  }

  /** Replaces the status of the object at its resourceVersion: a 409 means someone wrote it since. */
  writeStatus(type: SpecType, object: CustomResource, status: ResourceStatus): Promise<CustomResource> {
    const { namespace, name } = object.metadata;
    return this.objects.replaceNamespacedCustomObjectStatus({
      group: CRD_GROUP, version: CRD_VERSION, namespace, plural: CRD_NAMES[type].plural, name,
      body: { apiVersion: object.apiVersion, kind: object.kind, metadata: { name, namespace, resourceVersion: object.metadata.resourceVersion }, status },
      fieldManager: FIELD_MANAGER,
    });
  }

  /** Records a Kubernetes event on the object, which `kubectl describe` lists. */
  async recordEvent(object: CustomResource, type: 'Normal' | 'Warning', reason: string, message: string): Promise<void> {
    const { namespace, name, uid } = object.metadata;
    const now = new Date();
    await this.core.createNamespacedEvent({
      namespace,
      body: {
        metadata: { generateName: `${name}.`, namespace },
        involvedObject: { apiVersion: object.apiVersion, kind: object.kind, name, namespace, uid, resourceVersion: object.metadata.resourceVersion },
        type, reason, message: message.slice(0, MAX_EVENT_MESSAGE), firstTimestamp: now, lastTimestamp: now, count: 1,
        source: { component: FIELD_MANAGER },
      },
    });
  }

  /**
   * Changes the finalizers with a JSON patch that first tests the resourceVersion, so a patch made from an old
   * copy fails (422) instead of dropping another controller's finalizer.
   */
  setFinalizers(type: SpecType, object: CustomResource, finalizers: string[]): Promise<CustomResource> {
    const { namespace, name } = object.metadata;
    return this.objects.patchNamespacedCustomObject({
      group: CRD_GROUP, version: CRD_VERSION, namespace, plural: CRD_NAMES[type].plural, name,
      body: [
        { op: 'test', path: '/metadata/resourceVersion', value: object.metadata.resourceVersion },
        { op: 'add', path: '/metadata/finalizers', value: finalizers },
      ],
      fieldManager: FIELD_MANAGER,
    });
  }
}
