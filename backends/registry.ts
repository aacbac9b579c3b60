import { join } from 'node:path';
import { BackendError, type Backend } from './backend.js';
import { BackendConfig, GpucloudBackendConfig, LocalBackendConfig } from './config.js';
import { GpucloudBackend } from './gpucloud/client.js';
import { LocalBackend } from './local/local.js';
import { firstMismatch } from './validation.js';

export interface BackendEnvironment {
  /** Folder where backends keep what must survive a server restart. */
  stateDir: string;
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
  throw new BackendError(`unknown backend type ${JSON.stringify(type)}: use gpucloud or local`);
}

function assertShape(schema: typeof BackendConfig.anyOf[number], config: unknown, type: string): void {
  const mismatch = firstMismatch(schema, config);
  if (mismatch) throw new BackendError(`invalid ${type} backend config: ${mismatch}`);
}
