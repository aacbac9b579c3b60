import { CronExpressionParser } from 'cron-parser';

/** What `schedule.cron` takes, as error messages say it. */
export const CRON_EXPECTED = 'a cron expression of 5 fields (minute hour day-of-month month day-of-week, such as "*/5 * * * *"), or 6 with seconds first';

/** Each field as written: numbers, *, lists (,), ranges (-) and steps (/); month and day-of-week also take names (jan, mon). */
const NUMERIC_FIELD = /^[0-9*,/-]+$/;
const NAMED_FIELD = /^(?:[0-9*,/-]|[A-Za-z]{3})+$/;
const FIELD_NAMES = ['minute', 'hour', 'day-of-month', 'month', 'day-of-week'];

/** `schedule.cron` as a list, whichever of its two forms was written. */
export function cronExpressions(schedule: { cron: string | readonly string[] }): string[] {
  return typeof schedule.cron === 'string' ? [schedule.cron] : [...schedule.cron];
}

/**
 * Throws an Error saying what is wrong with the expression. cron-parser does the parsing; this only keeps it
 * to standard cron (it would also fill in missing fields, and take Jenkins' random `H` and Quartz' `L`, `W`, `#`).
 */
export function checkCron(expression: string): void {
  const fields = expression.trim().split(/\s+/).filter((field) => field !== '');
  if (fields.length !== 5 && fields.length !== 6) {
    throw new Error(`expected ${CRON_EXPECTED}; got ${JSON.stringify(expression)}, which has ${fields.length} ${fields.length === 1 ? 'field' : 'fields'}`);
  }
  const names = fields.length === 6 ? ['second', ...FIELD_NAMES] : FIELD_NAMES;
  fields.forEach((field, index) => {
    const named = names[index] === 'month' || names[index] === 'day-of-week';
    if (!(named ? NAMED_FIELD : NUMERIC_FIELD).test(field)) {
      throw new Error(`the ${names[index]} field "${field}" of ${JSON.stringify(expression)} is not standard cron: use numbers, *, lists (1,15), ranges (1-5) and steps (*/10)${named ? `, or names such as ${names[index] === 'month' ? 'jan' : 'mon'}` : ''}`);
    }
  });
  try {
    parse(expression, new Date()).next();
  } catch (error) {
    throw new Error(`invalid cron expression ${JSON.stringify(expression)}: ${(error as Error).message}; expected ${CRON_EXPECTED}`);
  }
}

function parse(expression: string, after: Date) {
  return CronExpressionParser.parse(expression, { tz: 'UTC', currentDate: after });
}

/** The first time after `after` that any of the expressions names, in UTC. */
export function nextTick(expressions: readonly string[], after: Date): Date {
  const times = expressions.map((expression) => parse(expression, after).next().getTime());
  return new Date(Math.min(...times));
}

/** `2026-11-24 06:10:00 UTC`, as schedules are written. */
export function formatUtc(time: Date): string {
  return `${time.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
}
