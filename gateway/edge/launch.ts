import { mkdirSync } from 'node:fs';
import { GATEWAY_TOKEN_VARIABLE } from '../../api/gateway-process.js';
import { startUntilListening } from '../../agent/launch.js';
import { processStartTime } from '../../backends/processes.js';

export interface GatewayLaunch {
  serverUrl: string;
  token: string;
  host: string;
  httpPort: number;
  httpsPort: number;
  /** Its log goes here; removing the folder ends it. */
  stateDir: string;
}

export interface StartedGateway {
  pid: number;
  startTime: string | null;
}

/** Starts `orchestrator gateway-server` detached, so that it outlives this server and serves while it restarts. */
export async function startGatewayProcess(launch: GatewayLaunch, timeoutMs = 20_000): Promise<StartedGateway> {
  mkdirSync(launch.stateDir, { recursive: true });
  const { child } = await startUntilListening(
    ['gateway-server', '--server', launch.serverUrl, '--host', launch.host, '--http-port', String(launch.httpPort),
      '--https-port', String(launch.httpsPort), '--state-dir', launch.stateDir],
    { [GATEWAY_TOKEN_VARIABLE]: launch.token }, true, timeoutMs);
  // Nothing of this process may keep the gateway, or be kept by it.
  child.unref();
  child.stdout?.destroy();
  child.stderr?.destroy();
  return { pid: child.pid!, startTime: processStartTime(child.pid!) };
}
