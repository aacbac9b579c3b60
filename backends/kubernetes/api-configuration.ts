import { createConfiguration, ServerConfiguration, type Configuration, type KubeConfig } from '@kubernetes/client-node';

/**
 * The client's configuration for `config`'s current cluster, as `makeApiClient` makes it, with a timeout on every
 * call: an API server that stops answering must never hold a controller or a backend call.
 */
export function configurationWithTimeout(config: KubeConfig, timeoutMs: number): Configuration {
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
