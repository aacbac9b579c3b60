import type { V1Pod, V1Secret } from '@kubernetes/client-node';
import type { Offer } from '../../api/offer.js';
import { AGENT_TOKEN_VARIABLE } from '../../api/agent.js';
import { GPU_RESOURCE, type NodeGpuModel } from './gpu-labels.js';

export const MANAGED_BY_SELECTOR = 'app.kubernetes.io/managed-by=orchestrator';
/** The label that holds the instance record's id, which a second create with the same key finds. */
export const INSTANCE_LABEL = 'orchestrator.dev/instance';
export const OFFER_ANNOTATION = 'orchestrator.dev/offer';
export const AGENT_CONTAINER = 'agent';
const TOKEN_KEY = 'token';

export interface AgentPodSettings {
  namespace: string;
  image: string;
  agentPort: number;
}

export interface AgentPodRequest {
  /** The pod's name, which its Secret shares. */
  name: string;
  instanceName: string;
  idempotencyKey: string;
  offer: Offer;
  /** The label and value of the offer's GPU model, which the pod's node must carry. */
  model: NodeGpuModel | null;
  shmSizeMib?: number;
}

/** The pod's name for an instance record: the same key always gives the same pod. */
export function podName(idempotencyKey: string): string {
  return `orchestrator-${idempotencyKey.toLowerCase().replace(/[^a-z0-9-]/g, '-')}`.slice(0, 63).replace(/-+$/, '');
}

/**
 * A pod that runs `orchestrator agent` (the image's entrypoint) on the pod's IP and the agent port: the offer's CPU,
 * memory and disk (as ephemeral storage) requested, its GPUs as the `nvidia.com/gpu` limit on a node of the offer's
 * model, the GPU nodes' taint tolerated, /dev/shm a memory volume of the run's shm_size. It is never restarted:
 * an agent that ends is an instance that ended.
 */
export function agentPod(settings: AgentPodSettings, request: AgentPodRequest): V1Pod {
  const { offer, model } = request;
  const gpus = offer.gpu.count;
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name: request.name,
      namespace: settings.namespace,
      labels: { 'app.kubernetes.io/managed-by': 'orchestrator', 'app.kubernetes.io/component': 'agent', [INSTANCE_LABEL]: request.idempotencyKey },
      annotations: { [OFFER_ANNOTATION]: offer.offerId, 'orchestrator.dev/instance-name': request.instanceName },
    },
    spec: {
      restartPolicy: 'Never',
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      ...(gpus > 0 && model?.label ? {
        affinity: {
          nodeAffinity: {
            requiredDuringSchedulingIgnoredDuringExecution: {
              nodeSelectorTerms: [{ matchExpressions: [{ key: model.label.key, operator: 'In', values: [model.label.value] }] }],
            },
          },
        },
      } : {}),
      tolerations: gpus > 0 ? [{ key: GPU_RESOURCE, operator: 'Exists', effect: 'NoSchedule' }] : [],
      containers: [{
        name: AGENT_CONTAINER,
        image: settings.image,
        args: ['agent', '--host', '0.0.0.0', '--port', String(settings.agentPort), '--runtime', 'process', '--instance-id', request.name],
        env: [{ name: AGENT_TOKEN_VARIABLE, valueFrom: { secretKeyRef: { name: request.name, key: TOKEN_KEY } } }],
        ports: [{ name: 'agent', containerPort: settings.agentPort }],
        resources: {
          requests: { cpu: String(offer.cpus), memory: `${offer.memoryMib}Mi`, 'ephemeral-storage': `${offer.diskMib}Mi` },
          ...(gpus > 0 ? { limits: { [GPU_RESOURCE]: String(gpus) } } : {}),
        },
        volumeMounts: [{ name: 'shm', mountPath: '/dev/shm' }],
      }],
      volumes: [{
        name: 'shm',
        emptyDir: { medium: 'Memory', ...(request.shmSizeMib ? { sizeLimit: `${request.shmSizeMib}Mi` } : {}) },
      }],
    },
  };
}

/** The Secret that gives the pod's agent its token, owned by the pod so that Kubernetes removes it with the pod. */
export function agentTokenSecret(pod: V1Pod, token: string): V1Secret {
  const { name, namespace, uid, labels } = pod.metadata!;
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    metadata: { name, namespace, labels, ownerReferences: [{ apiVersion: 'v1', kind: 'Pod', name: name!, uid: uid! }] },
    type: 'Opaque',
    stringData: { [TOKEN_KEY]: token },
  };
}
