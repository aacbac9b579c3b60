import type { KubeConfig } from '@kubernetes/client-node';
import { advertisedServerUrl, StartupError, type ServerConfig } from '../config.js';
import { loadKubeConfig } from '../../backends/kubernetes/api-configuration.js';
import type { KubernetesSourceOptions } from './source-controller.js';

/** The source controller's settings from config.yml's `kubernetes` section; a kubeconfig it cannot read stops the server. */
export function kubernetesSourceOptions(config: ServerConfig): Omit<KubernetesSourceOptions, 'resyncMs'> | null {
  const settings = config.kubernetes;
  if (!settings) return null;
  const where = settings.kubeconfig ?? 'the default kubeconfig or the pod\'s service account';
  let kubeConfig: KubeConfig;
  try {
    kubeConfig = loadKubeConfig(settings.kubeconfig);
  } catch (error) {
    throw new StartupError(`kubernetes: cannot load ${where}: ${(error as Error).message}`);
  }
  if (!kubeConfig.getCurrentCluster()) throw new StartupError(`kubernetes: ${where} names no cluster; give kubernetes.kubeconfig in config.yml, or run the server in a pod`);
  return {
    config: kubeConfig, namespaces: settings.watch.namespaces ?? null, defaultProject: settings.watch.project ?? config.projects[0].name,
    serverUrl: advertisedServerUrl(config),
  };
}
