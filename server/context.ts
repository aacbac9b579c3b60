import type { Logger } from 'winston';
import type { BackendPool } from '../controllers/backend-pool.js';
import type { Db } from '../store/db.js';
import type { SecretBox } from '../store/secrets.js';

/** What every route needs: the database, the backends, and where to log. */
export interface ServerContext {
  db: Db;
  pool: BackendPool;
  logger: Logger;
  version: string;
  /** Bytes of log text one run keeps at most (config.yml `logs.max_size_per_run`). */
  maxLogBytesPerRun: number;
  /** GET /metrics without a token (config.yml `metrics.public`). */
  metricsPublic: boolean;
  /** Encrypts and decrypts the projects' secrets with the server's key. */
  secrets: SecretBox;
  /** Where the built console is served from; the checkout's dist/console when left out. */
  consoleDir?: string;
}
