import { join } from 'node:path';
import { BackendError, type Backend } from './backend.js';
import { parseDuration } from '../api/duration.js';
import type { JobRuntime } from '../api/not-acted-on.js';
import { BackendConfig, GpucloudBackendConfig, KubernetesBackendConfig, LocalBackendConfig } from './config.js';
import { GpucloudBackend } from './gpucloud/client.js';
import { agentAddress } from './kubernetes/agent-address.js';
import { KubernetesBackend } from './kubernetes/kubernetes.js';
import { LocalBackend } from './local/local.js';
import { firstMismatch } from './validation.js';

export interface BackendEnvironment {
  /** Folder where backends keep what must survive a server restart. */
  stateDir: string;
}

/**
 * How every instance of a backend runs its jobs, where its config fixes it before any agent is up: a local backend
 * with a runtime set, and the kubernetes backend, whose pods' agents run jobs as processes. Null when it depends on
 * the machine.
 */
export function fixedJobRuntime(config: BackendConfig): JobRuntime | null {
  if (config.type === 'kubernetes') return 'process';
  if (config.type === 'local' && config.runtime !== undefined && config.runtime !== 'auto') return config.runtime;
  return null;
}

/** The backend driver for one config.yml entry; a malformed entry gets a BackendError naming the field. */
export function createBackend(config: BackendConfig, options: BackendEnvironment): Backend {
  const type = (config as { type?: unknown } | null)?.type;
  if (type === 'gpucloud') {
    assertShape(GpucloudBackendConfig, config, 'gpucloud');
    const gpucloud = config as GpucloudBackendConfig;
    return new GpucloudBackend({ apiKey: gpucloud.creds.api_key, ...(gpucloud.api_url ? { apiUrl: gpucloud.api_url } : {}) });
  }
  if (type === 'local') {
    assertShape(LocalBackendConfig, config, 'local');
    const local = config as LocalBackendConfig;
    return new LocalBackend({
      stateDir: join(options.stateDir, 'local'),
      ...(local.runtime ? { runtime: local.runtime } : {}),
      ...(local.instances ? { instances: local.instances } : {}),
    });
  }
  if (type === 'kubernetes') {
    assertShape(KubernetesBackendConfig, config, 'kubernetes');
    const kubernetes = config as KubernetesBackendConfig;
    return new KubernetesBackend({
      ...(kubernetes.kubeconfig ? { kubeconfig: kubernetes.kubeconfig } : {}),
      ...(kubernetes.namespace ? { namespace: kubernetes.namespace } : {}),
      ...(kubernetes.image ? { image: kubernetes.image } : {}),
      ...(kubernetes.agent_port ? { agentPort: kubernetes.agent_port } : {}),
      ...(kubernetes.price_per_gpu_hour !== undefined ? { pricePerGpuHour: kubernetes.price_per_gpu_hour } : {}),
      ...(kubernetes.unschedulable_timeout !== undefined ? { unschedulableTimeoutSeconds: durationSetting('unschedulable_timeout', kubernetes.unschedulable_timeout) } : {}),
      agentAddress: agentAddress(kubernetes.agent_address ?? 'auto'),
    });
  }
  throw new BackendError(`unknown backend type ${JSON.stringify(type)}: use gpucloud, local or kubernetes`);
}

function durationSetting(field: string, value: string | number): number {
  try {
    return parseDuration(value);
  } catch (error) {
    throw new BackendError(`invalid kubernetes backend config: /${field}: ${(error as Error).message}`);
  }
}

function assertShape(schema: typeof BackendConfig.anyOf[number], config: unknown, type: string): void {
  const mismatch = firstMismatch(schema, config);
  if (mismatch) throw new BackendError(`invalid ${type} backend config: ${mismatch}`);
}
