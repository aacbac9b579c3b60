import type { Logger } from 'winston';
import { CHANNELS } from '../store/channels.js';
import type { Db } from '../store/db.js';
import { accrue, accrueAll, rollAllDays } from '../store/ledger.js';
import type { Controller } from './manager.js';

/**
 * How often the ledger counts every instance. A server killed without warning loses nothing (the next count, by whichever
 * server, covers the time since the last); this is how late spend is seen (by budgets, `cost`, `ps`) at most.
 */
export const DEFAULT_ACCRUAL_INTERVAL_MS = 15_000;

/**
 * Writes the ledger: every `everyMs` it counts each instance's time since the last count (store/ledger.ts#accrueAll, a
 * batch of accounts a statement) and adds the hours it is done with to their days (rollAllDays, for reports), and at each
 * pass between that follows a NOTIFY on instances it settles the instances that have just ended.
 * Any number of servers may run it on one database: each count moves an instance's account under its row lock.
 */
export class LedgerController implements Controller {
  readonly name = 'ledger';
  readonly channel = CHANNELS.instances;
  private lastAccrual = 0;

  constructor(private readonly db: Db, private readonly logger: Logger, private readonly everyMs = DEFAULT_ACCRUAL_INTERVAL_MS) {}

  /** Between counts, ended instances are settled after a NOTIFY on instances: an instance's end sends one (instance-controller.ts#end). */
  async pass(_nudged?: () => boolean, heard = true): Promise<number> {
    const dueInMs = this.lastAccrual + this.everyMs - Date.now();
    if (dueInMs > 0) {
      if (heard) await accrue(this.db, { endedOnly: true });
      return dueInMs;
    }
    this.lastAccrual = Date.now();
    const counted = await accrueAll(this.db);
    const rolled = await rollAllDays(this.db);
    this.logger.debug(`ledger: counted ${counted} instances, rolled the finished hours of ${rolled} into their days`);
    return this.everyMs;
  }
}
