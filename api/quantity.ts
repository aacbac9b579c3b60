import { Type, type Static } from '@sinclair/typebox';

/** An inclusive range; null leaves that end open. */
export const Range = Type.Object({
  min: Type.Union([Type.Number(), Type.Null()]),
  max: Type.Union([Type.Number(), Type.Null()]),
});
export type Range = Static<typeof Range>;

export const OPEN_RANGE: Range = { min: null, max: null };

const MIB_PER_UNIT: Record<string, number> = { MB: 1, GB: 1024, TB: 1024 * 1024 };
const SIZE_REGEX = /^(\d+(?:\.\d+)?)\s*(?:([MGT])I?B)?$/;
export const SIZE_EXAMPLES = '512MB, 24GB, 1.5TB; a bare number means GB';

/** Whether a text is written like a size (a number with a unit), as opposed to a count. */
export function looksLikeSize(text: string): boolean {
  return /^\d+(?:\.\d+)?\s*[MGT]I?B$/.test(text.trim().toUpperCase());
}

/** MiB in a size such as `512MB`, `100GB`, `1TB` (binary units: 1GB = 1024MB); a bare number is GB. */
export function parseSize(text: string | number): number {
  if (typeof text === 'number') {
    if (!Number.isFinite(text) || text < 0) throw new Error(`invalid size ${text}; expected a size such as ${SIZE_EXAMPLES}`);
    return Math.round(text * MIB_PER_UNIT.GB);
  }
  const match = SIZE_REGEX.exec(String(text).trim().toUpperCase());
  if (!match) throw new Error(`invalid size "${text}"; expected a size such as ${SIZE_EXAMPLES}`);
  return Math.round(Number(match[1]) * MIB_PER_UNIT[`${match[2] ?? 'G'}B`]);
}

function trimNumber(value: number): string {
  return String(Number(value.toFixed(2)));
}

/** Shortest readable size for a number of MiB, e.g. 81920 → `80GB`, 512 → `512MB`. */
export function formatSize(mib: number): string {
  if (mib >= MIB_PER_UNIT.TB && Number.isInteger(mib / MIB_PER_UNIT.TB)) return `${mib / MIB_PER_UNIT.TB}TB`;
  if (mib >= MIB_PER_UNIT.GB) return `${trimNumber(mib / MIB_PER_UNIT.GB)}GB`;
  return `${trimNumber(mib)}MB`;
}

function splitRange(text: string, what: string): [string, string] | [string] {
  const parts = text.split('..');
  if (parts.length > 2) throw new Error(`invalid ${what} "${text}"; a range has one "..", e.g. 1..8`);
  if (parts.length === 2) {
    if (parts[0].trim() === '' && parts[1].trim() === '') throw new Error(`invalid ${what} "${text}"; give at least one end of the range, e.g. 1.. or ..8`);
    return [parts[0].trim(), parts[1].trim()];
  }
  return [parts[0].trim()];
}

function checkOrder(text: string, what: string, range: Range, format: (n: number) => string): Range {
  if (range.min !== null && range.max !== null && range.min > range.max) {
    throw new Error(`invalid ${what} "${text}": the minimum ${format(range.min)} is greater than the maximum ${format(range.max)}`);
  }
  return range;
}

/** A size or a size range: `24GB` (exactly), `24GB..`, `..80GB`, `24GB..80GB`. */
export function parseSizeRange(input: string | number): Range {
  if (typeof input === 'number') {
    const size = parseSize(input);
    return { min: size, max: size };
  }
  const text = String(input);
  const ends = splitRange(text, 'size range');
  if (ends.length === 1) {
    try {
      const size = parseSize(ends[0]);
      return { min: size, max: size };
    } catch {
      throw new Error(`invalid size "${text}"; expected a size such as 24GB, or a range such as 24GB.., ..80GB or 24GB..80GB`);
    }
  }
  const parseEnd = (end: string): number | null => {
    if (end === '') return null;
    try {
      return parseSize(end);
    } catch {
      throw new Error(`invalid size range "${text}": "${end}" is not a size; expected e.g. 24GB.., ..80GB or 24GB..80GB`);
    }
  };
  return checkOrder(text, 'size range', { min: parseEnd(ends[0]), max: parseEnd(ends[1]) }, formatSize);
}

export interface CountRangeRules {
  /** The smallest value allowed at either end. */
  least: number;
  /** Whether the upper end must be given, for counts that cost money when left open. */
  bounded: boolean;
  /** What is counted, for messages: "GPU count", "node count". */
  what: string;
}

/** A count or a count range: `2` (exactly), `1..8`, `0..8`, `1..`, `..4`. */
export function parseCountRange(input: string | number, rules: CountRangeRules): Range {
  const text = String(input).trim();
  const ends = splitRange(text, rules.what);
  const parseEnd = (end: string): number | null => {
    if (end === '') return null;
    if (!/^\d+$/.test(end)) {
      throw new Error(`invalid ${rules.what} "${text}"; expected a whole number or a range such as ${rules.least}..8`);
    }
    const value = Number(end);
    if (value < rules.least) throw new Error(`invalid ${rules.what} "${text}": ${value} is below the minimum of ${rules.least}`);
    return value;
  };
  const range: Range = ends.length === 1
    ? { min: parseEnd(ends[0]), max: parseEnd(ends[0]) }
    : { min: parseEnd(ends[0]), max: parseEnd(ends[1]) };
  if (rules.bounded && range.max === null) {
    const lower = range.min ?? rules.least;
    throw new Error(`invalid ${rules.what} "${text}": an open range is not supported, as it could spend without limit; the range needs an upper bound, e.g. ${lower}..${lower + 4}`);
  }
  return checkOrder(text, rules.what, range, String);
}

/** `2`, `1..8`, `24GB..`, `..4`, or '' for a fully open range. */
export function formatRange(range: Range, format: (n: number) => string = String): string {
  if (range.min === null && range.max === null) return '';
  if (range.min !== null && range.min === range.max) return format(range.min);
  return `${range.min === null ? '' : format(range.min)}..${range.max === null ? '' : format(range.max)}`;
}

export function inRange(value: number, range: Range): boolean {
  return (range.min === null || value >= range.min) && (range.max === null || value <= range.max);
}

/** The values both ranges allow, or null when they share none. */
export function intersectRanges(a: Range, b: Range): Range | null {
  const min = a.min === null ? b.min : b.min === null ? a.min : Math.max(a.min, b.min);
  const max = a.max === null ? b.max : b.max === null ? a.max : Math.min(a.max, b.max);
  if (min !== null && max !== null && min > max) return null;
  return { min, max };
}
