import type { Logger } from 'winston';
import { CHANNELS } from '../store/channels.js';
import type { Db } from '../store/db.js';
import { tablesDueForVacuum, vacuum } from '../store/vacuum.js';
import type { Controller } from './manager.js';

/** How often the embedded database's tables are looked at; autovacuum's own default is a minute. */
const EMBEDDED_VACUUM_EVERY_MS = 10_000;

/**
 * Autovacuum for the embedded database. PGlite runs PostgreSQL in single-user mode, where autovacuum's workers never
 * start, so the dead versions that every update of a row leaves stayed for good, in the table and in each of its
 * indexes: a claim reading the due index up to now read every dead entry ever left there, and grew dearer with every
 * look at a run the server had made (bench/README.md, "Autovacuum for the embedded database"). This vacuums the
 * tables autovacuum's rule picks. PostgreSQL runs its own.
 */
export class EmbeddedVacuum implements Controller {
  readonly name = 'embedded-vacuum';
  // A channel it never hears: the interval alone drives it.
  readonly channel = CHANNELS.instances;
  private lastLookAt = Number.NEGATIVE_INFINITY;

  constructor(private readonly db: Db, private readonly logger: Logger, private readonly everyMs = EMBEDDED_VACUUM_EVERY_MS) {}

  hears(): boolean {
    return false;
  }

  async pass(): Promise<number> {
    const untilLook = this.lastLookAt + this.everyMs - performance.now();
    if (untilLook > 0) return untilLook;
    this.lastLookAt = performance.now();
    for (const table of await tablesDueForVacuum(this.db)) {
      const started = performance.now();
      await vacuum(this.db, table);
      this.logger.debug(`vacuumed ${table} in ${Math.round(performance.now() - started)} ms`);
    }
    return this.everyMs;
  }
}
