import { Type, type Static } from '@sinclair/typebox';
import type { ProjectBackend } from '../api/objects.js';

/** One entry of a project's `backends:` list in the server's config.yml. */
export const GpucloudBackendConfig = Type.Object({
  type: Type.Literal('gpucloud'),
  api_url: Type.Optional(Type.String({ minLength: 1 })),
  creds: Type.Object({
    type: Type.Literal('api_key'),
    api_key: Type.String({ minLength: 1 }),
  }, { additionalProperties: false }),
}, { additionalProperties: false });
export type GpucloudBackendConfig = Static<typeof GpucloudBackendConfig>;

export const LocalBackendConfig = Type.Object({
  type: Type.Literal('local'),
  runtime: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('docker'), Type.Literal('process')])),
  /** How many instances may run on this machine at once. */
  instances: Type.Optional(Type.Integer({ minimum: 1 })),
}, { additionalProperties: false });
export type LocalBackendConfig = Static<typeof LocalBackendConfig>;

/** Instances as pods of a Kubernetes cluster, each running the agent on GPU nodes' `nvidia.com/gpu`. */
export const KubernetesBackendConfig = Type.Object({
  type: Type.Literal('kubernetes'),
  /** A kubeconfig file; without it, $KUBECONFIG, ~/.kube/config, or the service account of the pod the server runs in. */
  kubeconfig: Type.Optional(Type.String({ minLength: 1 })),
  /** The namespace the pods are made in; `default` when left out. */
  namespace: Type.Optional(Type.String({ pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', maxLength: 63 })),
  /** The image whose `node dist/cli/main.js agent` the pods run: the server's own image. */
  image: Type.Optional(Type.String({ minLength: 1 })),
  /** The port the agent listens on in each pod. */
  agent_port: Type.Optional(Type.Integer({ minimum: 1, maximum: 65535 })),
  /** How the server reaches the agents: at the pod's IP (from inside the cluster), or through the API server's pod proxy. */
  agent_address: Type.Optional(Type.Union([Type.Literal('auto'), Type.Literal('pod-ip'), Type.Literal('api-proxy')])),
  /** What one GPU costs per hour, for the cheapest-first choice across backends: an offer of N GPUs costs N times this; 0 when left out. */
  price_per_gpu_hour: Type.Optional(Type.Number({ minimum: 0 })),
  /** How long a pod may stay unschedulable before it is given up, e.g. 5m. */
  unschedulable_timeout: Type.Optional(Type.Union([Type.String(), Type.Number()])),
}, { additionalProperties: false });
export type KubernetesBackendConfig = Static<typeof KubernetesBackendConfig>;

export const BackendConfig = Type.Union([GpucloudBackendConfig, LocalBackendConfig, KubernetesBackendConfig]);
export type BackendConfig = Static<typeof BackendConfig>;

/** Fields that hold or may one day hold a credential: never shown, whatever the backend. */
const CREDENTIAL_FIELD = /cred|key|token|secret|password/i;

/** A backend's configuration as members may see it: its plain settings, and of its credentials only their kind. */
export function backendView(config: BackendConfig): ProjectBackend {
  const settings: ProjectBackend['settings'] = {};
  for (const [field, value] of Object.entries(config)) {
    if (field === 'type' || CREDENTIAL_FIELD.test(field)) continue;
    if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') settings[field] = value;
  }
  return { type: config.type, settings, credentials: 'creds' in config ? config.creds.type : null };
}
