import { randomUUID } from 'node:crypto';
import { formatUtc } from '../api/cron.js';
import type { Db, Queryable, Row } from './db.js';
import { recordEvent } from './events.js';
import { updateLeased } from './leases.js';
import { FINISHED, nextRunMessage, toRun, type RunRecord } from './runs.js';

/**
 * A schedule (a task, service or dev environment with `schedule`) is a row of `runs` with status `pending` between its
 * runs, `next_tick_at` its next due time; each run it submits is an ordinary run of its kind (`<name>-<n>`) with
 * `schedule_id` and `scheduled_for` set. A service it submits is published under the schedule's name.
 */
export interface ScheduleRecord extends RunRecord {
  nextTickAt: Date;
}

export const toSchedule = (row: Row): ScheduleRecord => ({ ...toRun(row), nextTickAt: row.next_tick_at });

/** Whether the run is a schedule (live or ended), not a run it submitted, whose spec has no schedule. */
export function isSchedule(run: Pick<RunRecord, 'spec'>): boolean {
  return run.spec.schedule !== undefined;
}

/** A schedule that still submits runs: a re-apply updates it. */
export function isLiveSchedule(run: Pick<RunRecord, 'spec' | 'status' | 'desired'>): boolean {
  return isSchedule(run) && run.status === 'pending' && run.desired === 'run';
}

/** A re-apply of a live schedule: the new spec and times take effect from the next tick; runs already submitted carry on. */
export async function updateSchedule(q: Queryable, schedule: RunRecord, next: Pick<RunRecord, 'spec' | 'files' | 'repos' | 'requirement' | 'priority'>, nextTickAt: Date): Promise<void> {
  await q.query(
    `UPDATE runs SET spec = $2, files = $3, repos = $4, requirement = $5, priority = $6, next_tick_at = $7, status_message = $8,
       generation = generation + 1, next_reconcile_at = $7, updated_at = now()
     WHERE id = $1`,
    [schedule.id, next.spec, next.files, next.repos, next.requirement, next.priority, nextTickAt, nextRunMessage(nextTickAt)]);
}

/** What a due tick came to. */
export type TickOutcome =
  | { kind: 'submitted'; run: RunRecord }
  | { kind: 'skipped' }
  /** Another server took the tick, or the schedule changed or ended meanwhile. */
  | { kind: 'lost' };

/** The lowest `<name>-<n>` above every run of the project so named that is still listed, so a new schedule of an old name never replaces its runs. */
async function nextRunName(q: Queryable, schedule: RunRecord): Promise<string> {
  const [{ highest }] = await q.query<{ highest: number | null }>(
    `SELECT max(substring(name from $2)::bigint) AS highest FROM runs WHERE project_id = $1 AND NOT deleted AND name ~ $2`,
    [schedule.projectId, `^${schedule.name}-([0-9]{1,8})$`]);
  return `${schedule.name}-${Number(highest ?? 0) + 1}`;
}

/**
 * Takes the due tick and, in the same transaction, submits its run: the tick moves to `nextTickAt` only where it
 * is still `due` and the lease still ours, so two servers never take one tick, and a crash takes none. A tick that
 * falls while a run of the schedule is still active is skipped. Missed ticks are one `due`: a server that was down
 * submits once, not once per tick it missed.
 */
export async function submitTick(db: Db, schedule: ScheduleRecord, owner: string, nextTickAt: Date, missedMore: boolean): Promise<TickOutcome> {
  const due = schedule.nextTickAt;
  return db.transaction(async (tx) => {
    const taken = await tx.query(
      `UPDATE runs SET next_tick_at = $4, updated_at = now()
       WHERE id = $1 AND lease_owner = $2 AND next_tick_at = $3 AND status = 'pending' AND desired = 'run' RETURNING id`,
      [schedule.id, owner, due, nextTickAt]);
    if (taken.length === 0) return { kind: 'lost' };
    const tick = `${formatUtc(due)}${missedMore ? ' (later times missed while no server ran are not made up)' : ''}`;
    const event = (reason: string, message: string) => recordEvent(tx, { projectId: schedule.projectId, objectKind: 'run', objectId: schedule.id, objectName: schedule.name, reason, message });
    const [active] = await tx.query<{ name: string; status: string }>(
      `SELECT name, status FROM runs WHERE schedule_id = $1 AND NOT deleted AND status NOT IN ${FINISHED} ORDER BY submitted_at DESC LIMIT 1`, [schedule.id]);
    if (active) {
      await setMessage(tx, schedule.id, `${nextRunMessage(nextTickAt)}; skipped ${formatUtc(due)}: ${active.name} was still ${active.status}`);
      await event('TickSkipped', `${tick}: ${active.name} is still ${active.status}`);
      return { kind: 'skipped' };
    }
    const name = await nextRunName(tx, schedule);
    const { schedule: _schedule, ...spec } = schedule.spec;
    const rows = await tx.query(
      `INSERT INTO runs (id, project_id, user_id, name, kind, spec, files, repos, requirement, priority, status, status_message, schedule_id, scheduled_for)
       SELECT $2, project_id, user_id, $3, kind, $4, files, repos, requirement, priority, 'submitted', 'waiting to be scheduled', id, $5
       FROM runs WHERE id = $1 RETURNING *`,
      [schedule.id, randomUUID(), name, { ...spec, name }, due]);
    const run = toRun(rows[0]);
    await setMessage(tx, schedule.id, `${nextRunMessage(nextTickAt)}; last run ${name}, submitted for ${formatUtc(due)}`);
    await event('TickSubmitted', `${name} submitted for ${tick}`);
    await recordEvent(tx, { projectId: run.projectId, objectKind: 'run', objectId: run.id, objectName: run.name, reason: 'Submitted', message: `${run.kind} submitted by schedule ${schedule.name} for ${formatUtc(due)}` });
    return { kind: 'submitted', run };
  });
}

async function setMessage(q: Queryable, id: string, message: string): Promise<void> {
  await q.query('UPDATE runs SET status_message = $2 WHERE id = $1', [id, message]);
}

/** Ends a schedule the user stopped: no run is submitted after this; those already submitted carry on. False when the lease was lost. */
export async function endSchedule(db: Queryable, schedule: ScheduleRecord, owner: string): Promise<boolean> {
  const ended = await updateLeased<'status' | 'termination_reason' | 'status_message' | 'next_tick_at' | 'finished_at'>(db, 'runs', schedule.id, owner, {
    status: 'terminated',
    termination_reason: schedule.desired === 'abort' ? 'aborted_by_user' : 'stopped_by_user',
    status_message: 'schedule ended by the user; the runs it submitted carry on',
    next_tick_at: null,
    finished_at: new Date(),
  });
  if (ended) {
    await recordEvent(db, { projectId: schedule.projectId, objectKind: 'run', objectId: schedule.id, objectName: schedule.name, reason: 'Terminated', message: 'schedule ended by the user; no more runs will be submitted' });
  }
  return ended;
}

/** The run the schedule submitted last, whatever became of it; null before its first. */
export async function latestScheduledRun(q: Queryable, scheduleId: string): Promise<RunRecord | null> {
  const rows = await q.query(`SELECT * FROM runs WHERE schedule_id = $1 AND NOT deleted ORDER BY submitted_at DESC LIMIT 1`, [scheduleId]);
  return rows[0] ? toRun(rows[0]) : null;
}
