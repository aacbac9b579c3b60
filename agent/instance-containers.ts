import { configuredDockerHost, dockerClient } from './docker-connection.js';
import { LABELS } from './docker-runtime.js';

/**
 * Removes every container an agent of `instanceId` created, running or not. Containers outlive
 * their agent on purpose (a restarted agent re-attaches), so whoever ends an instance for good
 * calls this. Returns how many were removed.
 */
export async function removeInstanceContainers(instanceId: string, dockerHost: string = configuredDockerHost()): Promise<number> {
  const docker = dockerClient(dockerHost);
  const containers = await docker.listContainers({ all: true, filters: { label: [`${LABELS.instanceId}=${instanceId}`] } });
  await Promise.all(containers.map((info) => docker.getContainer(info.Id).remove({ force: true }).catch((error: unknown) => {
    if ((error as { statusCode?: number }).statusCode !== 404) throw error;
  })));
  return containers.length;
}
