import type { ApiException, CoreV1Api, KubeConfig, V1Pod } from '@kubernetes/client-node';
import type { Offer } from '../../api/offer.js';
import { agentVersion } from '../../agent/version.js';
import {
  BackendAuthError, BackendError, NoCapacityError,
  type Backend, type BackendInstance, type CreateInstanceRequest,
} from '../backend.js';
import { configurationWithTimeout, loadKubeConfig, statusCodeOf } from './api-configuration.js';
import { kubernetesClient } from './client.js';
import { nodeGpuModel } from './gpu-labels.js';
import { holdsResources, nodeOffers, parseOfferId } from './offers.js';
import {
  agentPod, agentTokenSecret, podName, AGENT_CONTAINER, INSTANCE_LABEL, MANAGED_BY_SELECTOR, OFFER_ANNOTATION, type AgentPodSettings,
} from './pod.js';
import type { AgentAddress } from './agent-address.js';

export interface KubernetesBackendOptions {
  /** A kubeconfig file; without it, $KUBECONFIG, ~/.kube/config, or the pod's service account. */
  kubeconfig?: string;
  namespace?: string;
  image?: string;
  agentPort?: number;
  pricePerGpuHour?: number;
  /** Seconds a pod may stay unschedulable before the instance is given up. */
  unschedulableTimeoutSeconds?: number;
  /** How the server reaches the agents, made from the loaded kubeconfig. */
  agentAddress: (config: KubeConfig, settings: AgentPodSettings) => AgentAddress;
}

export const DEFAULT_NAMESPACE = 'default';
export const DEFAULT_AGENT_PORT = 8484;
export const DEFAULT_UNSCHEDULABLE_TIMEOUT_SECONDS = 300;
/** Pods that hold what they request; a large cluster's finished pods are many, and are left out by the API server. */
const UNFINISHED = 'status.phase!=Succeeded,status.phase!=Failed';
/** A call that takes longer is abandoned and tried again by the controller's next pass. */
const REQUEST_TIMEOUT_MS = 15_000;

/** The image a pod's agent runs: the server's own, of this version (docs/kubernetes.md builds it). */
export function defaultAgentImage(): string {
  return `orchestrator/server:${agentVersion()}`;
}

/**
 * Instances as pods of a Kubernetes cluster: each pod runs `orchestrator agent` with the offer's GPUs, CPU, memory
 * and disk. Offers come from the nodes' allocatable `nvidia.com/gpu` and GPU model labels, less what pods request.
 */
export class KubernetesBackend implements Backend {
  readonly type = 'kubernetes' as const;
  private readonly core: CoreV1Api;
  private readonly settings: AgentPodSettings;
  private readonly pricePerGpuHour: number;
  private readonly unschedulableTimeoutMs: number;
  private readonly address: AgentAddress;

  constructor(options: KubernetesBackendOptions) {
    const where = options.kubeconfig ?? 'the default kubeconfig ($KUBECONFIG, ~/.kube/config) or the pod\'s service account';
    let config: KubeConfig;
    try {
      config = loadKubeConfig(options.kubeconfig);
    } catch (error) {
      throw new BackendError(`the kubernetes backend cannot load ${where}: ${(error as Error).message}`);
    }
    if (!config.getCurrentCluster()) throw new BackendError(`the kubernetes backend's ${where} names no cluster; give kubeconfig in config.yml`);
    this.core = new (kubernetesClient().CoreV1Api)(configurationWithTimeout(config, REQUEST_TIMEOUT_MS));
    this.settings = {
      namespace: options.namespace ?? DEFAULT_NAMESPACE,
      image: options.image ?? defaultAgentImage(),
      agentPort: options.agentPort ?? DEFAULT_AGENT_PORT,
    };
    this.pricePerGpuHour = options.pricePerGpuHour ?? 0;
    this.unschedulableTimeoutMs = (options.unschedulableTimeoutSeconds ?? DEFAULT_UNSCHEDULABLE_TIMEOUT_SECONDS) * 1000;
    this.address = options.agentAddress(config, this.settings);
  }

  async offers(): Promise<Offer[]> {
    const [nodes, pods] = await Promise.all([
      this.call('list nodes', () => this.core.listNode({})),
      this.call('list pods', () => this.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName!=,${UNFINISHED}` })),
    ]);
    return nodes.items.flatMap((node) =>
      nodeOffers(node, pods.items.filter((pod) => pod.spec?.nodeName === node.metadata?.name), this.pricePerGpuHour));
  }

  async create(request: CreateInstanceRequest): Promise<BackendInstance> {
    const { offer } = request;
    if (offer.backend !== 'kubernetes') throw new BackendError(`offer ${offer.offerId} belongs to backend ${offer.backend}, not kubernetes`);
    const name = podName(request.idempotencyKey);
    const existing = await this.readPod(name);
    const pod = existing ?? await this.createPod(request, name);
    await this.ensureTokenSecret(pod, request.agentToken);
    return this.toInstance(pod);
  }

  async get(id: string): Promise<BackendInstance> {
    const pod = await this.readPod(id);
    if (!pod) return { id, idempotencyKey: '', status: 'terminated', agentUrl: null, region: '', reason: `pod ${this.settings.namespace}/${id} no longer exists` };
    return this.toInstance(pod);
  }

  async list(): Promise<BackendInstance[]> {
    const pods = await this.call('list pods', () => this.core.listNamespacedPod({ namespace: this.settings.namespace, labelSelector: MANAGED_BY_SELECTOR }));
    return Promise.all(pods.items.map((pod) => this.toInstance(pod)));
  }

  async close(): Promise<void> {
    await this.address.close?.();
  }

  async terminate(id: string): Promise<void> {
    const { namespace } = this.settings;
    await this.ignoringNotFound(`delete pod ${id}`, () => this.core.deleteNamespacedPod({ name: id, namespace }));
    await this.ignoringNotFound(`delete secret ${id}`, () => this.core.deleteNamespacedSecret({ name: id, namespace }));
  }

  private async createPod(request: CreateInstanceRequest, name: string): Promise<V1Pod> {
    const { offer } = request;
    const placement = parseOfferId(offer.offerId);
    if (!placement) throw new BackendError(`offer ${offer.offerId} is not one of the kubernetes backend's`);
    const node = await this.ignoringNotFound(`read node ${placement.node}`, () => this.core.readNode({ name: placement.node }));
    if (!node) throw new NoCapacityError(`node ${placement.node} is gone from the cluster`);
    const pods = await this.call('list pods', () => this.core.listPodForAllNamespaces({ fieldSelector: `spec.nodeName=${placement.node},${UNFINISHED}` }));
    const current = nodeOffers(node, pods.items, this.pricePerGpuHour).find((candidate) => candidate.offerId === offer.offerId);
    if (current?.availability !== 'available') {
      throw new NoCapacityError(`node ${placement.node} has no room for ${offer.offerId} now: ${pods.items.filter(holdsResources).length} pods hold its resources`);
    }
    const model = offer.gpu.count > 0 ? nodeGpuModel(node.metadata?.labels ?? {}) : null;
    const body = agentPod(this.settings, {
      name, instanceName: request.name, idempotencyKey: request.idempotencyKey, offer, model,
      ...(request.shmSizeMib ? { shmSizeMib: request.shmSizeMib } : {}),
    });
    try {
      return await this.call(`create pod ${name}`, () => this.core.createNamespacedPod({ namespace: this.settings.namespace, body }));
    } catch (error) {
      // Another server made it for the same instance a moment ago.
      if (statusCodeOf((error as BackendError).cause) === 409) return (await this.readPod(name)) ?? Promise.reject(error);
      throw error;
    }
  }

  /** The agent's token reaches the pod through a Secret of the pod's name, never through the pod's spec. */
  private async ensureTokenSecret(pod: V1Pod, token: string): Promise<void> {
    const { namespace } = this.settings;
    const name = pod.metadata!.name!;
    const existing = await this.ignoringNotFound(`read secret ${name}`, () => this.core.readNamespacedSecret({ name, namespace }));
    if (existing) return;
    try {
      await this.call(`create secret ${name}`, () => this.core.createNamespacedSecret({ namespace, body: agentTokenSecret(pod, token) }));
    } catch (error) {
      if (statusCodeOf((error as BackendError).cause) !== 409) throw error;
    }
  }

  private async readPod(name: string): Promise<V1Pod | null> {
    return this.ignoringNotFound(`read pod ${name}`, () => this.core.readNamespacedPod({ name, namespace: this.settings.namespace }));
  }

  private async toInstance(pod: V1Pod): Promise<BackendInstance> {
    const name = pod.metadata!.name!;
    const base = { id: name, idempotencyKey: pod.metadata?.labels?.[INSTANCE_LABEL] ?? '', region: '' };
    const phase = pod.status?.phase ?? 'Pending';
    if (pod.metadata?.deletionTimestamp) return { ...base, status: 'terminated', agentUrl: null, reason: `pod ${name} is being deleted` };
    if (phase === 'Succeeded' || phase === 'Failed') return { ...base, status: phase === 'Failed' ? 'failed' : 'terminated', agentUrl: null, reason: endReason(pod) };
    if (phase === 'Running' && pod.status?.podIP) return { ...base, status: 'running', agentUrl: await this.address.agentUrl(pod) };
    const unschedulable = pod.status?.conditions?.find((c) => c.type === 'PodScheduled' && c.status === 'False' && c.reason === 'Unschedulable');
    const pendingMs = Date.now() - new Date(pod.metadata?.creationTimestamp ?? Date.now()).getTime();
    if (unschedulable && pendingMs >= this.unschedulableTimeoutMs) {
      return { ...base, status: 'failed', agentUrl: null, reason: `pod ${name} could not be scheduled within ${this.unschedulableTimeoutMs / 1000}s: ${unschedulable.message ?? 'Unschedulable'}` };
    }
    return { ...base, status: 'provisioning', agentUrl: null, reason: waitingReason(pod, unschedulable?.message) };
  }

  /** One API call; its failure becomes a BackendError that says what was tried and what the API server answered. */
  private async call<T>(what: string, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (error) {
      const status = statusCodeOf(error);
      const detail = error instanceof kubernetesClient().ApiException ? apiMessage(error) : (error as Error).message;
      const message = `kubernetes: cannot ${what} in ${status === undefined ? 'the cluster' : `namespace ${this.settings.namespace}`}: ${detail}`;
      const failure = status === 401 || status === 403 ? new BackendAuthError(message) : new BackendError(message, status === undefined || status >= 500 || status === 429);
      failure.cause = error;
      throw failure;
    }
  }

  private async ignoringNotFound<T>(what: string, work: () => Promise<T>): Promise<T | null> {
    try {
      return await this.call(what, work);
    } catch (error) {
      if (statusCodeOf((error as BackendError).cause) === 404) return null;
      throw error;
    }
  }
}

/** The message of the API server's Status answer, or the status code when the body is not one. */
function apiMessage(error: ApiException<unknown>): string {
  const body = typeof error.body === 'string' ? parseJson(error.body) : error.body;
  const message = (body as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? `${message} (${error.code})` : `HTTP ${error.code}`;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** Why a pending pod is not running yet: the scheduler's message, or why its agent container waits. */
function waitingReason(pod: V1Pod, unschedulable: string | undefined): string {
  if (unschedulable) return `unschedulable: ${unschedulable}`;
  const waiting = pod.status?.containerStatuses?.find((c) => c.name === AGENT_CONTAINER)?.state?.waiting;
  if (waiting?.reason) return `${waiting.reason}${waiting.message ? `: ${waiting.message}` : ''}`;
  return pod.spec?.nodeName ? `starting on node ${pod.spec.nodeName}` : 'waiting for the scheduler';
}

/** How a finished pod's agent ended: the container's reason and exit code, or the pod's own reason (Evicted...). */
function endReason(pod: V1Pod): string {
  const terminated = pod.status?.containerStatuses?.find((c) => c.name === AGENT_CONTAINER)?.state?.terminated;
  if (terminated) return `the agent container ended (${terminated.reason ?? 'exit'} ${terminated.exitCode})${terminated.message ? `: ${terminated.message}` : ''}`;
  const offerId = pod.metadata?.annotations?.[OFFER_ANNOTATION];
  return `pod ${pod.metadata?.name} ${pod.status?.phase?.toLowerCase()}${pod.status?.reason ? ` (${pod.status.reason})` : ''}${pod.status?.message ? `: ${pod.status.message}` : ''}${offerId ? ` on ${offerId}` : ''}`;
}
