import type { Logger } from 'winston';
import { cronExpressions, nextTick } from '../api/cron.js';
import { CHANNELS } from '../store/channels.js';
import type { Db, Row } from '../store/db.js';
import { endSchedule, submitTick, toSchedule, type ScheduleRecord } from '../store/schedules.js';
import { LeasedController } from './leased.js';

/**
 * A schedule is looked at this often at least, besides at its ticks: a re-apply that lands while a pass holds
 * the row has its new time seen within this long, even when the pass then asks to sleep until the old one.
 */
const MAX_SLEEP_MS = 30_000;

/** Submits a run of each schedule (task, service or dev environment) when its time comes, and ends the schedules users stopped. */
export class ScheduleController extends LeasedController<ScheduleRecord> {
  readonly name = 'schedule';

  constructor(db: Db, owner: string, logger: Logger) {
    super(db, owner, logger, { table: 'runs', channel: CHANNELS.runs, where: `status = 'pending'`, hears: { statuses: ['pending'] } });
  }

  protected toRecord(row: Row): ScheduleRecord {
    return toSchedule(row);
  }

  protected async reconcile(schedule: ScheduleRecord): Promise<number> {
    if (schedule.desired !== 'run') {
      await endSchedule(this.db, schedule, this.owner);
      return MAX_SLEEP_MS;
    }
    const expressions = cronExpressions(schedule.spec.schedule);
    const now = new Date();
    if (schedule.nextTickAt > now) return Math.min(MAX_SLEEP_MS, schedule.nextTickAt.getTime() - now.getTime());
    const next = nextTick(expressions, now);
    const missedMore = nextTick(expressions, schedule.nextTickAt) <= now;
    const outcome = await submitTick(this.db, schedule, this.owner, next, missedMore);
    if (outcome.kind === 'lost') return 0;
    if (outcome.kind === 'submitted') await this.db.notify(CHANNELS.runs);
    return Math.min(MAX_SLEEP_MS, next.getTime() - Date.now());
  }
}
