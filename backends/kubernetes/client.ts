import { createRequire } from 'node:module';
import type * as KubernetesClient from '@kubernetes/client-node';

const require = createRequire(import.meta.url);

/**
 * @kubernetes/client-node, loaded at its first use rather than with the server: it takes about 60 MB of a process's
 * memory, and a server whose config names no cluster never uses it (bench/README.md, the embedded footprint).
 */
export function kubernetesClient(): typeof KubernetesClient {
  return require('@kubernetes/client-node');
}
