import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createNetServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import winston from 'winston';
import { KEEP_ALIVE_SERVER_OPTIONS } from '../api/keep-alive.js';
import { BackendPool } from '../controllers/backend-pool.js';
import { BudgetController } from '../controllers/budget-controller.js';
import { EmbeddedVacuum } from '../controllers/embedded-vacuum.js';
import { FleetController } from '../controllers/fleet-controller.js';
import { GatewayController } from '../controllers/gateway-controller.js';
import { DEFAULT_INSTANCE_TIMINGS, InstanceController, type InstanceTimings } from '../controllers/instance-controller.js';
import { ControllerManager } from '../controllers/manager.js';
import { LedgerController } from '../controllers/ledger-controller.js';
import { NodesController } from '../controllers/nodes-controller.js';
import { RunController } from '../controllers/run-controller.js';
import { RunWatchController, SOLE_SERVER_WATCH_LEASE_MS } from '../controllers/run-watch.js';
import { ScheduleController } from '../controllers/schedule-controller.js';
import { Scheduler } from '../controllers/scheduler.js';
import { ServiceController } from '../controllers/service-controller.js';
import { DEFAULT_WEBHOOK_TIMINGS, WebhookDeliveryController, type WebhookTimings } from '../controllers/webhook-delivery.js';
import { Gateway } from '../gateway/gateway.js';
import { applyConfigBudget } from '../store/budgets.js';
import { DataDirInUseError } from '../store/data-dir-lock.js';
import type { Db } from '../store/db.js';
import { openDatabase } from '../store/open.js';
import { DataDirWithoutDatabaseError } from '../store/pglite.js';
import { newToken, upsertProject, upsertUser } from '../store/projects.js';
import { SecretBox } from '../store/secrets.js';
import { EventLog } from './event-log.js';
import { createApp } from './app.js';
import { KubernetesSource } from './kubernetes/source-controller.js';
import { kubernetesSourceOptions } from './kubernetes/start.js';
import { SshRelay } from './routes/ssh.js';
import { advertisedServerUrl, loadServerConfig, maxLogBytesPerRun, StartupError } from './config.js';
import { serverDir } from './paths.js';
import { loadSecretsKey } from './secrets-key.js';
import { VERSION } from './version.js';
import { takeOverPredecessorLeases } from './predecessor-leases.js';

export interface ServerOptions {
  host?: string;
  port?: number;
  dir?: string;
  databaseUrl?: string;
  adminToken?: string;
  logLevel?: string;
  controllerIntervalMs?: number;
  instanceTimings?: Partial<InstanceTimings>;
  /** Webhook timeouts and retry backoff; tests shorten them. */
  webhookTimings?: Partial<WebhookTimings>;
  /** How often the ledger counts the instances' time (default 5 s). */
  ledgerIntervalMs?: number;
  /** The built web console to serve at / (default: dist/console of the checkout). */
  consoleDir?: string;
  /** Told of the database as soon as it is open, before the server uses it: a test watches its statements from the start. */
  onDatabaseOpen?: (db: Db) => void;
}

export interface RunningServer {
  url: string;
  adminToken: string;
  /** Where the admin token came from: only one the server made itself is shown at start-up. */
  adminTokenSource: 'generated' | 'environment' | 'option';
  configPath: string;
  db: Db;
  close(): Promise<void>;
}

/** Opens the database, applies config.yml, starts the controllers and serves the API. */
export async function startServer(options: ServerOptions = {}): Promise<RunningServer> {
  const dir = options.dir ?? serverDir();
  mkdirSync(dir, { recursive: true });
  const configPath = join(dir, 'config.yml');
  const config = loadServerConfig(configPath);
  const kubernetesOptions = kubernetesSourceOptions(config);
  const secrets = new SecretBox(loadSecretsKey(dir, config.secrets?.key));
  const logger = winston.createLogger({
    level: options.logLevel ?? process.env.ORCHESTRATOR_LOG_LEVEL ?? 'info',
    format: winston.format.combine(winston.format.timestamp(), winston.format.printf((i) => `${i.timestamp} ${i.level} ${i.message}`)),
    transports: [new winston.transports.Console({ stderrLevels: ['error', 'warn', 'info', 'debug'] })],
  });
  const databaseUrl = options.databaseUrl || process.env.ORCHESTRATOR_DATABASE_URL || undefined;
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 3000;
  // A second server on this machine is told by its port or its data directory, before it opens the database.
  await ensurePortFree(host, port);
  const db = await openDatabase({ url: databaseUrl, dataDir: join(dir, 'data') }).catch((error: unknown) => {
    if (error instanceof DataDirWithoutDatabaseError) throw new StartupError(error.message);
    if (!(error instanceof DataDirInUseError)) throw error;
    throw new StartupError(`the embedded database in ${error.dataDir} is in use by the server with pid ${error.pid}; stop it, or use --server-dir / ORCHESTRATOR_DATABASE_URL`);
  });
  options.onDatabaseOpen?.(db);
  for (const project of config.projects) {
    const { id } = await upsertProject(db, project.name, project.backends);
    await applyConfigBudget(db, id, project.budget);
  }
  const fromEnvironment = process.env.ORCHESTRATOR_SERVER_ADMIN_TOKEN || undefined;
  const adminTokenSource = options.adminToken ? 'option' : fromEnvironment ? 'environment' : 'generated';
  const adminToken = options.adminToken || fromEnvironment || storedAdminToken(dir);
  await upsertUser(db, 'admin', adminToken, 'admin');

  const pool = new BackendPool(db, join(dir, 'backends'));
  const logLimit = maxLogBytesPerRun(config);
  const context = { db, pool, logger, version: VERSION, maxLogBytesPerRun: logLimit, metricsPublic: config.metrics?.public === true, secrets, consoleDir: options.consoleDir };
  const app = createApp(context);
  const ssh = new SshRelay(context, app);
  const owner = `server-${randomUUID().slice(0, 8)}`;
  // One process at a time opens the embedded database's directory: no other server holds a lease there or waits for one
  // to run out, so a start takes every lease back and the watch can hold its runs longer.
  const soleServer = db.driver === 'pglite';
  await takeOverPredecessorLeases(db, dir, owner, soleServer);
  const gateway = new Gateway({ db, logger, source: owner });
  await gateway.start();
  const api = app.callback();
  const http: Server = await new Promise<Server>((resolve, reject) => {
    const s = createServer(KEEP_ALIVE_SERVER_OPTIONS,
      (req, res) => void (gateway.handles(req) ? gateway.web(req, res) : api(req, res)));
    s.on('upgrade', (req, socket, head) => void (ssh.handles(req) ? ssh.upgrade(req, socket, head) : gateway.upgrade(req, socket, head)));
    s.listen(port, host, () => resolve(s));
    s.once('error', (error: NodeJS.ErrnoException) => reject(error.code === 'EADDRINUSE' ? portInUse(host, port) : error));
  }).catch(async (error) => {
    await gateway.close();
    await db.close();
    throw error;
  });

  const timings = { ...DEFAULT_INSTANCE_TIMINGS, ...options.instanceTimings };
  const listening = http.address() as AddressInfo;
  const reachable = ['0.0.0.0', '::'].includes(listening.address) ? '127.0.0.1' : listening.family === 'IPv6' ? `[${listening.address}]` : listening.address;
  // The controllers' statements queue behind requests' (store/query-priority.ts). The backend pool stays on the
  // requests' handle: routes list offers through it, and one must not wait behind the controllers' queue; what the
  // controllers read through it (a project's backends, when they provision, terminate or list offers) is rare.
  const work = db.background;
  const starter = new RunController(work, owner, logger, 'start', logLimit, secrets);
  const manager = new ControllerManager(work, owner, [
    new Scheduler(work, pool, starter),
    starter,
    new RunWatchController(work, owner, logger, logLimit, secrets, soleServer ? SOLE_SERVER_WATCH_LEASE_MS : undefined),
    new InstanceController(work, owner, logger, pool, timings),
    new FleetController(work, owner, logger, pool),
    new ServiceController(work, owner, logger, secrets),
    new NodesController(work, owner, logger),
    new ScheduleController(work, owner, logger),
    new LedgerController(work, logger, options.ledgerIntervalMs),
    new BudgetController(work, logger),
    new GatewayController(work, owner, logger, {
      serverUrl: `http://${reachable}:${listening.port}`, instanceServerUrl: advertisedServerUrl(config) ?? `http://${reachable}:${listening.port}`, stateDir: join(dir, 'gateways'),
    }, pool),
    new WebhookDeliveryController(work, owner, logger, secrets, VERSION, { ...DEFAULT_WEBHOOK_TIMINGS, ...options.webhookTimings }),
    ...db.driver === 'pglite' ? [new EmbeddedVacuum(work, logger)] : [],
  ], logger, options.controllerIntervalMs);
  await manager.start();
  // Custom resources mirror the database; a look every five controller loops is the safety net under watches and NOTIFYs.
  const kubernetes = kubernetesOptions ? new KubernetesSource(db, logger, { ...kubernetesOptions, resyncMs: 5 * (options.controllerIntervalMs ?? 1000) }) : null;
  await kubernetes?.start();
  const eventLog = new EventLog(db, logger);
  await eventLog.start();
  const address = http.address() as AddressInfo;
  const url = `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`;
  logger.info(`serving the API on ${url}/api and the web console on ${url}/ (${db.driver} database, controllers as ${owner})`);
  return {
    url,
    adminToken,
    adminTokenSource,
    configPath,
    db,
    close: async () => {
      ssh.close();
      await eventLog.stop();
      await kubernetes?.stop();
      await gateway.close();
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
      await manager.stop();
      await pool.close();
      await db.close();
    },
  };
}

function portInUse(host: string, port: number): StartupError {
  return new StartupError(`${host}:${port} is already in use; is another server running? (--port picks another)`);
}

/** Listens on the address for a moment: a taken port is said before the database is opened (port 0 is never taken). */
async function ensurePortFree(host: string, port: number): Promise<void> {
  if (port === 0) return;
  await new Promise<void>((resolve, reject) => {
    const probe = createNetServer();
    probe.once('error', (error: NodeJS.ErrnoException) => reject(error.code === 'EADDRINUSE' ? portInUse(host, port) : error));
    probe.listen(port, host, () => probe.close(() => resolve()));
  });
}

/** The admin token is shown at every start, so it is kept (owner-only) beside the config. */
function storedAdminToken(dir: string): string {
  const path = join(dir, 'admin-token');
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const token = newToken();
  writeFileSync(path, `${token}\n`, { mode: 0o600 });
  return token;
}
