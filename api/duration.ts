const UNIT_SECONDS = { w: 604_800, d: 86_400, h: 3_600, m: 60, s: 1 } as const;
type Unit = keyof typeof UNIT_SECONDS;
const UNITS = Object.keys(UNIT_SECONDS) as Unit[];

export const DURATION_EXAMPLES = '30s, 5m, 2h, 3d, 1w, 1h30m or a number of seconds';

function invalid(input: string | number, offAllowed: boolean, why?: string): Error {
  const shown = typeof input === 'string' ? `"${input}"` : String(input);
  const expected = `expected a duration such as ${DURATION_EXAMPLES}${offAllowed ? ', or off' : ''}`;
  return new Error(`invalid duration ${shown}${why ? `: ${why}` : ''}; ${expected}`);
}

function parse(input: string | number, offAllowed: boolean): number {
  if (typeof input === 'number') {
    if (!Number.isInteger(input) || input < 0) throw invalid(input, offAllowed, 'seconds must be a whole number, 0 or more');
    return input;
  }
  if (typeof input !== 'string') throw invalid(String(input), offAllowed);
  const text = input.trim();
  if (/^\d+$/.test(text)) return Number(text);
  if (text === 'off' && !offAllowed) throw invalid(input, false, 'this duration cannot be turned off');
  const parts = [...text.matchAll(/(\d+)([a-z]+)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) throw invalid(input, offAllowed);
  let seconds = 0;
  let previousRank = -1;
  for (const [, amount, unit] of parts) {
    const rank = UNITS.indexOf(unit as Unit);
    if (rank < 0) throw invalid(input, offAllowed, `unknown unit "${unit}" (use s, m, h, d or w)`);
    if (rank <= previousRank) throw invalid(input, offAllowed, 'give each unit once, largest first');
    previousRank = rank;
    seconds += Number(amount) * UNIT_SECONDS[unit as Unit];
  }
  return seconds;
}

/**
 * Texts already read, and their seconds: a service's durations are read again at every routing read and every look at
 * it (at 10 000 runs, 1.5% of the server's CPU went to reading the same few texts). Bounded, as texts come from users.
 */
const known = new Map<string, number>();
const KNOWN_MAX = 1_000;

/** Seconds in a duration such as `30s`, `5m`, `1h30m`, `1w`, or a bare number of seconds. */
export function parseDuration(input: string | number): number {
  if (typeof input !== 'string') return parse(input, false);
  const seen = known.get(input);
  if (seen !== undefined) return seen;
  const seconds = parse(input, false);
  if (known.size >= KNOWN_MAX) known.clear();
  known.set(input, seconds);
  return seconds;
}

/** Like parseDuration, and `off` gives null: the limit is disabled. */
export function parseDurationOrOff(input: string | number): number | null {
  if (typeof input === 'string' && input.trim() === 'off') return null;
  return parse(input, true);
}

/** The shortest text parseDuration reads back as the same number of seconds, e.g. 5400 → `1h30m`. */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) throw new Error(`cannot format ${seconds} as a duration; expected 0 seconds or more`);
  let rest = Math.round(seconds);
  if (rest === 0) return '0s';
  let text = '';
  for (const unit of UNITS) {
    const amount = Math.floor(rest / UNIT_SECONDS[unit]);
    if (amount > 0) {
      text += `${amount}${unit}`;
      rest -= amount * UNIT_SECONDS[unit];
    }
  }
  return text;
}
