import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { CAC } from 'cac';
import { GATEWAY_TOKEN_VARIABLE } from '../../api/gateway-process.js';

/** How often the gateway looks for its state folder, with `--state-dir`: a server whose folder is gone never comes back for it. */
const STATE_DIR_CHECK_MS = 1000;

interface GatewayServerFlags {
  server: string;
  host: string;
  httpPort: string | number;
  httpsPort: string | number;
  stateDir?: string;
}

function fail(message: string): never {
  process.stderr.write(`orchestrator gateway-server: ${message}\n`);
  process.exit(2);
}

function portOf(value: string | number, flag: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`invalid ${flag} ${value}: expected 0-65535`);
  return port;
}

/**
 * `orchestrator gateway-server`: publishes a project's services on a domain, over HTTP and HTTPS. Its server
 * starts it (gateways with backend local); prints {"event":"listening","http":...,"https":...} once it serves.
 */
export function registerGatewayServer(cli: CAC): void {
  cli
    .command('gateway-server', `Run a gateway (token from ${GATEWAY_TOKEN_VARIABLE}); the server starts it for each gateway`)
    .option('--server <url>', 'The orchestrator server to take routes and certificates from')
    .option('--host <host>', 'Address to listen on', { default: '0.0.0.0' })
    .option('--http-port <port>', 'Port of plain HTTP (ACME challenges and redirects)', { default: 80 })
    .option('--https-port <port>', 'Port of HTTPS', { default: 443 })
    .option('--state-dir <dir>', 'Folder for its log; the gateway ends once the folder is removed')
    .action(async (flags: GatewayServerFlags) => {
      const token = process.env[GATEWAY_TOKEN_VARIABLE];
      if (!token) fail(`${GATEWAY_TOKEN_VARIABLE} must be set to the token the server gave this gateway`);
      delete process.env[GATEWAY_TOKEN_VARIABLE];
      if (!flags.server || !URL.canParse(flags.server)) fail('--server: expected the server\'s URL, such as http://127.0.0.1:3000');
      const stateDir = flags.stateDir;
      const { default: winston } = await import('winston');
      const logger = winston.createLogger({
        level: process.env.ORCHESTRATOR_LOG_LEVEL ?? 'info',
        format: winston.format.combine(winston.format.timestamp(), winston.format.printf((i) => `${i.timestamp} ${i.level} ${i.message}`)),
        transports: [stateDir ? new winston.transports.File({ filename: join(stateDir, 'gateway.log'), maxsize: 16 * 1024 * 1024, maxFiles: 2 }) : new winston.transports.Console()],
      });
      // The gateway outlives whoever started it: a closed pipe or terminal must not stop it.
      process.stdout.on('error', () => undefined);
      process.stderr.on('error', () => undefined);
      process.on('SIGHUP', () => undefined);

      logger.on('error', () => undefined);
      const { EdgeGateway } = await import('../../gateway/edge/edge-gateway.js');
      let stopping = false;
      const stop = (why: string, code: number) => {
        if (stopping) return;
        stopping = true;
        logger.info(`gateway: stopping: ${why}`);
        void gateway.close().finally(() => logger.on('finish', () => process.exit(code)).end());
      };
      const gateway = new EdgeGateway({
        serverUrl: flags.server.replace(/\/+$/, ''), token, host: String(flags.host),
        httpPort: portOf(flags.httpPort, '--http-port'), httpsPort: portOf(flags.httpsPort, '--https-port'),
        logger, onRevoked: (reason) => stop(reason, 0),
      });
      const ports = await gateway.start().catch((error: Error) => fail(error.message));
      process.stdout.write(`${JSON.stringify({ event: 'listening', ...ports })}\n`);
      if (stateDir) {
        setInterval(() => {
          if (!existsSync(stateDir)) stop(`${stateDir} was removed`, 0);
        }, STATE_DIR_CHECK_MS).unref();
      }
      process.once('SIGTERM', () => stop('SIGTERM', 0));
      process.once('SIGINT', () => stop('SIGINT', 0));
    });
}
