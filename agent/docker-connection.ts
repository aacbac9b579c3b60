import Docker from 'dockerode';

export const DEFAULT_DOCKER_HOST = 'unix:///var/run/docker.sock';

/** A Docker Engine API client for `unix:///path`, `tcp://host:port` or `http://host:port` (DOCKER_HOST syntax). */
export function dockerClient(dockerHost: string): Docker {
  if (dockerHost.startsWith('unix://')) return new Docker({ socketPath: dockerHost.slice('unix://'.length) });
  const url = new URL(dockerHost.replace(/^tcp:/, 'http:'));
  if (url.protocol !== 'http:') throw new Error(`unsupported DOCKER_HOST "${dockerHost}": use unix:// or tcp://`);
  return new Docker({ protocol: 'http', host: url.hostname, port: Number(url.port || 2375) });
}

/** The engine address this process would use: DOCKER_HOST when set, else the standard socket. */
export function configuredDockerHost(env: NodeJS.ProcessEnv = process.env): string {
  return env.DOCKER_HOST && env.DOCKER_HOST.length > 0 ? env.DOCKER_HOST : DEFAULT_DOCKER_HOST;
}

/** True when a Docker Engine API answers at `dockerHost` within `timeoutMs`. */
export async function dockerAnswers(dockerHost: string, timeoutMs = 2000): Promise<boolean> {
  let docker: Docker;
  try {
    docker = dockerClient(dockerHost);
  } catch {
    return false;
  }
  // dockerode 5's ping takes options; its published type definitions still describe the older signature.
  const ping = docker.ping as unknown as (this: Docker, options: { abortSignal: AbortSignal }) => Promise<unknown>;
  try {
    await ping.call(docker, { abortSignal: AbortSignal.timeout(timeoutMs) });
    return true;
  } catch {
    return false;
  }
}
