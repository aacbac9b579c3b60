import type { Configuration, KubeConfig } from '@kubernetes/client-node';
import { kubernetesClient } from './client.js';

/** The kubeconfig file named, or else the default: $KUBECONFIG, ~/.kube/config, or the pod's service account. */
export function loadKubeConfig(path: string | undefined): KubeConfig {
  const config = new (kubernetesClient().KubeConfig)();
  if (path) config.loadFromFile(path);
  else config.loadFromDefault();
  return config;
}

/** The HTTP status of a failed call, or undefined for a failure that is not an answer (the server unreachable). */
export function statusCodeOf(error: unknown): number | undefined {
  return error instanceof kubernetesClient().ApiException ? error.code : undefined;
}

/**
 * The client's configuration for `config`'s current cluster, as `makeApiClient` makes it, with a timeout on every
 * call: an API server that stops answering must never hold a controller or a backend call.
 */
export function configurationWithTimeout(config: KubeConfig, timeoutMs: number): Configuration {
  const { createConfiguration, ServerConfiguration } = kubernetesClient();
  return createConfiguration({
    baseServer: new ServerConfiguration(config.getCurrentCluster()!.server, {}),
    authMethods: { default: config },
    promiseMiddleware: [{
      pre: async (context) => {
        context.setSignal(AbortSignal.timeout(timeoutMs));
        return context;
      },
      post: async (response) => response,
    }],
  });
}
