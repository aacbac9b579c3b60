import { FormatRegistry, type TSchema } from '@sinclair/typebox';
import { checkCron } from './cron.js';
import { fleetNodes } from './fleet-rules.js';
import { parseDuration, parseDurationOrOff } from './duration.js';
import { wildcardBase } from './domains.js';
import { resolveEnv } from './env.js';
import { parseGpu, parseGpuModels, parseGpuVendor } from './gpu.js';
import { parseFileMapping, parsePortMapping, parseRepoEntry, parseVolumeMount } from './mappings.js';
import type { IssueAt, Path } from './issue-place.js';
import { isDnsLabel, NAME_RULE } from './names.js';
import { parseCountRange, parseSize, parseSizeRange } from './quantity.js';
import { parseCpu } from './resources.js';
import type { CheckName } from './spec.js';
import { closestMatch, quoteList } from './suggest.js';

export interface Issue {
  path: Path;
  message: string;
  at: IssueAt;
}

export interface ValidationContext {
  /** The applying user's environment for `env` entries without a value; null where there is none (the server). */
  environment: Record<string, string | undefined> | null;
  issues: Issue[];
  /** A better message for an unknown field than the generic one, e.g. naming the kinds it belongs to. */
  unknownFieldHint?: (path: Path, field: string) => string | null;
}

type Schema = Record<string, unknown>;

interface Check {
  /** Turns a value as written into the form the schema describes; reports and returns it unchanged when it cannot. */
  coerce?: (value: unknown, path: Path, context: ValidationContext) => unknown;
  /** Throws an Error whose message says what is wrong with a value whose shape the schema already accepted. */
  check?: (value: never) => void;
}

const PYTHON_VERSIONS = ['3.9', '3.10', '3.11', '3.12', '3.13'];

/** Fields of a map that stand for a range, as dstack also writes ranges: `{min: 2, max: 8}` is `2..8`. */
const RANGE_FIELDS = ['min', 'max'];

/**
 * A range written as a map (`{min: 16GB}`, `{min: 2, max: 8}`) in the `min..max` form the schema takes;
 * `extra` are further fields the map may have, which `onExtra` checks: one that says more than min keeps the map
 * (with min filled in). Other values pass unchanged.
 */
function rangeFromMap(value: unknown, extra: readonly string[] = [], onExtra?: (map: Record<string, unknown>) => void): unknown {
  if (!isMap(value)) return value;
  const keys = Object.keys(value);
  if (keys.length === 0 || !keys.every((key) => RANGE_FIELDS.includes(key) || extra.includes(key))) return value;
  onExtra?.(value);
  if (keys.some((key) => extra.includes(key) && value[key] !== (value.min ?? 0))) return { ...value, min: value.min ?? 0 };
  const end = (key: string) => (value[key] === undefined || value[key] === null ? '' : String(value[key]));
  return `${end('min')}..${end('max')}`;
}

const rangeCoercion: Check['coerce'] = (value) => rangeFromMap(value);

const CHECKS: Record<CheckName, Check> = {
  'name': {
    check: (value: string) => {
      if (!isDnsLabel(value)) throw new Error(`"${value}" is not a valid name; use ${NAME_RULE}`);
    },
  },
  'duration': { check: (value: string | number) => parseDuration(value) },
  'duration-or-off': { check: (value: string | number) => parseDurationOrOff(value) },
  'positive-duration': {
    check: (value: string | number) => {
      if (parseDuration(value) === 0) throw new Error(`invalid duration ${JSON.stringify(value)}: it must be longer than 0`);
    },
  },
  'size': { check: (value: string | number) => parseSize(value) },
  'size-range': { coerce: rangeCoercion, check: (value: string | number) => parseSizeRange(value) },
  'gpu': { check: (value: Parameters<typeof parseGpu>[0]) => parseGpu(value) },
  'gpu-models': { check: (value: string | string[]) => parseGpuModels(value) },
  'gpu-vendor': { check: (value: string) => parseGpuVendor(value) },
  'gpu-count': { coerce: rangeCoercion, check: (value: string | number) => parseCountRange(value, { least: 0, bounded: false, what: 'GPU count' }) },
  'cpu-range': {
    // dstack's map form: {arch, count} or a count range {min, max}.
    coerce: (value) => {
      if (!isMap(value) || !Object.hasOwn(value, 'count') || !Object.keys(value).every((key) => key === 'arch' || key === 'count')) return rangeFromMap(value);
      const count = rangeFromMap(value.count);
      return value.arch === undefined || (typeof count !== 'string' && typeof count !== 'number') ? count : `${String(value.arch)}:${count}`;
    },
    check: (value: string | number) => parseCpu(value),
  },
  'disk': {
    // dstack's map form: {size: 100GB..}.
    coerce: (value) => (isMap(value) && Object.keys(value).length === 1 && Object.hasOwn(value, 'size') ? rangeFromMap(value.size) : value),
    check: (value: string | number) => parseSizeRange(value),
  },
  'nodes': {
    // dstack's map form: {min, max} is the range min..max; with a target other than min it stays a map (FleetNodesTarget).
    coerce: (value, path, context) => rangeFromMap(value, ['target'], (map) => {
      const { min = 0, target, max } = map;
      if (![min, target, max].every((n) => n === undefined || Number.isInteger(n))) return;
      if ((target as number) < (min as number)) report(context, [...path, 'target'], `expected a number of at least min (${String(min)}): apply provisions target instances and the fleet keeps min`);
      if (max !== undefined && (target as number) > (max as number)) report(context, [...path, 'target'], `expected a number of at most max (${String(max)})`);
    }),
    // Whether a fleet may be open-ended depends on its backends: checkFleet (fleet-rules.ts) decides.
    check: (value: Parameters<typeof fleetNodes>[0]) => fleetNodes(value),
  },
  'replicas': { coerce: rangeCoercion, check: (value: string | number) => parseCountRange(value, { least: 0, bounded: true, what: 'replica count' }) },
  'python': {
    coerce: (value) => (typeof value === 'number' ? String(value) : value),
    check: (value: string) => {
      if (PYTHON_VERSIONS.includes(value)) return;
      const quoting = value === '3.1' ? '; YAML reads 3.10 as the number 3.1, so write "3.10" in quotes' : '';
      throw new Error(`Python "${value}" is not supported; expected one of ${PYTHON_VERSIONS.join(', ')}${quoting}`);
    },
  },
  'env': {
    coerce: (value, path, context) => resolveEnv(value, context.environment, path, (at, message, where) => report(context, at, message, where ?? 'value')),
  },
  'port-mapping': { check: (value: string) => parsePortMapping(value) },
  'file-mapping': { check: (value: string) => parseFileMapping(value) },
  'volume-mount': { check: (value: string) => parseVolumeMount(value) },
  'absolute-path': {
    check: (value: string) => {
      if (!value.startsWith('/')) throw new Error(`"${value}" is not an absolute path; start it with /`);
    },
  },
  'url-path': {
    check: (value: string) => {
      if (!value.startsWith('/')) throw new Error(`"${value}" is not a path; start it with /, e.g. /health`);
    },
  },
  'repo': { check: (value: Parameters<typeof parseRepoEntry>[0]) => parseRepoEntry(value) },
  'cron': { check: (value: string) => checkCron(value) },
  'wildcard-domain': { check: (value: string) => wildcardBase(value) },
  'http-url': {
    check: (value: string) => {
      if (!URL.canParse(value) || !['http:', 'https:'].includes(new URL(value).protocol)) throw new Error(`"${value}" is not an http:// or https:// URL`);
    },
  },
  'rate-limit': {
    // dstack's form of the key: {type: ip_address} or {type: header, header: X-Api-Key}.
    coerce: (value) => {
      if (!isMap(value) || !isMap(value.key) || value.header !== undefined) return value;
      const { type, header, ...other } = value.key;
      if (Object.keys(other).length > 0) return value;
      if (type === 'ip_address' && header === undefined) return { ...value, key: 'ip' };
      if (type === 'header' && typeof header === 'string') return { ...value, key: 'header', header };
      return value;
    },
    check: (value: { key?: string; header?: string }) => {
      if ((value.key ?? 'ip') === 'header' && value.header === undefined) throw new Error('key: header needs header, the name of the header whose value keys the bucket (such as X-Api-Key)');
      if ((value.key ?? 'ip') === 'ip' && value.header !== undefined) throw new Error('header is used only with key: header; with key: ip each client address has its bucket');
    },
  },
};

export function report(context: ValidationContext, path: Path, message: string, at: IssueAt = 'value'): void {
  context.issues.push({ path, message, at });
}

interface Visit {
  value: unknown;
  parent: Visit | null;
  key: string | number;
}

function pathOf(visit: Visit): Path {
  const path: Path = [];
  for (let current: Visit | null = visit; current?.parent; current = current.parent) path.unshift(current.key);
  return path;
}

const NUL_MESSAGE = 'contains a NUL character (\\u0000), which cannot be stored; remove it';

/**
 * Reports every string and every map key that holds a NUL character, at any depth (databases refuse
 * them). Walks without recursion, and each shared object (YAML aliases) once.
 */
export function reportNulCharacters(value: unknown, context: ValidationContext): void {
  const queue: Visit[] = [{ value, parent: null, key: '' }];
  const seen = new Set<object>();
  for (let index = 0; index < queue.length; index++) {
    const visit = queue[index]!;
    const current = visit.value;
    if (typeof current === 'string') {
      if (current.includes('\u0000')) report(context, pathOf(visit), NUL_MESSAGE);
      continue;
    }
    if (current === null || typeof current !== 'object' || seen.has(current)) continue;
    seen.add(current);
    for (const [key, item] of Object.entries(current)) {
      const child: Visit = { value: item, parent: visit, key: Array.isArray(current) ? Number(key) : key };
      if (!Array.isArray(current) && key.includes('\u0000')) report(context, pathOf(child), NUL_MESSAGE, 'key');
      queue.push(child);
    }
  }
}

function isMap(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** A value in a message. Strings are cut short; secrets show only their kind. */
export function describeValue(value: unknown, secret = false): string {
  if (value === null || value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  if (typeof value === 'object') return 'a map';
  if (secret) return `a ${typeof value}`;
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 37)}...` : value);
  return String(value);
}

function literals(schema: Schema): unknown[] | null {
  const branches = schema.anyOf as Schema[] | undefined;
  if (!branches || !branches.every((branch) => 'const' in branch)) return null;
  return branches.map((branch) => branch.const);
}

/** The phrase for what a schema accepts, as in "expected an integer from 1 to 65535". */
export function expectedOf(schema: Schema): string {
  if (typeof schema['x-expected'] === 'string') return schema['x-expected'];
  const values = literals(schema);
  if (values) return `one of ${quoteList(values as string[])}`;
  if (Array.isArray(schema.anyOf)) return (schema.anyOf as Schema[]).map(expectedOf).join(' or ');
  if ('const' in schema) return JSON.stringify(schema.const);
  const min = schema.minimum as number | undefined;
  const max = schema.maximum as number | undefined;
  switch (schema.type) {
    case 'string': return 'a string';
    case 'boolean': return 'true or false';
    case 'integer':
    case 'number': {
      const noun = schema.type === 'integer' ? 'an integer' : 'a number';
      if (min !== undefined && max !== undefined) return `${noun} from ${min} to ${max}`;
      if (min !== undefined) return `${noun} of at least ${min}`;
      if (typeof schema.exclusiveMinimum === 'number') return `${noun} greater than ${schema.exclusiveMinimum}`;
      return noun;
    }
    case 'array': {
      const items = schema.items as Schema;
      const itemValues = literals(items);
      if (itemValues) return `a list of ${quoteList(itemValues as string[])}`;
      if (items.type === 'string' && !items['x-expected']) return 'a list of strings';
      if (items.type === 'object') return 'a list of maps';
      return 'a list';
    }
    case 'object': {
      const fields = Object.keys((schema.properties as Schema | undefined) ?? {});
      return fields.length > 0 && fields.length <= 6 ? `a map with ${fields.join(', ')}` : 'a map';
    }
    default: return 'a value';
  }
}

function fits(schema: Schema, value: unknown): boolean {
  if (Array.isArray(schema.anyOf)) return (schema.anyOf as Schema[]).some((branch) => fits(branch, value));
  switch (schema.type) {
    case 'string': return typeof value === 'string';
    case 'integer': return typeof value === 'number' && Number.isInteger(value);
    case 'number': return typeof value === 'number' && Number.isFinite(value);
    case 'boolean': return typeof value === 'boolean';
    case 'array': return Array.isArray(value);
    case 'object': return isMap(value);
    case 'null': return value === null;
    default: return true;
  }
}

function mismatch(schema: Schema, value: unknown, path: Path, context: ValidationContext): void {
  report(context, path, `expected ${expectedOf(schema)}, got ${describeValue(value, schema['x-secret'] === true)}`);
}

/**
 * Checks `value` against a TypeBox schema and every `x-check` on the way, adding an issue for each
 * problem found (it does not stop at the first). Returns the value in the schema's form: a copy,
 * with `env` turned into a map and a Python version written as a number turned into a string.
 */
export function validateValue(schema: TSchema, value: unknown, context: ValidationContext, path: Path = []): unknown {
  const node = schema as Schema;
  const check = typeof node['x-check'] === 'string' ? CHECKS[node['x-check'] as CheckName] : undefined;
  const before = context.issues.length;
  const current = check?.coerce ? check.coerce(value, path, context) : value;
  if (context.issues.length > before) return current;
  const result = walk(node, current, path, context, check !== undefined);
  if (check?.check && context.issues.length === before) {
    try {
      (check.check as (value: unknown) => void)(result);
    } catch (error) {
      report(context, path, (error as Error).message);
    }
  }
  return result;
}

function walk(schema: Schema, value: unknown, path: Path, context: ValidationContext, checked: boolean): unknown {
  if (!fits(schema, value)) {
    mismatch(schema, value, path, context);
    return value;
  }
  const values = literals(schema);
  if (values) {
    if (!values.includes(value)) {
      const suggestion = typeof value === 'string' ? closestMatch(value, values as string[]) : null;
      report(context, path, `expected ${expectedOf(schema)}, got ${describeValue(value)}${suggestion ? `; did you mean "${suggestion}"?` : ''}`);
    }
    return value;
  }
  if (Array.isArray(schema.anyOf)) {
    const fitting = (schema.anyOf as Schema[]).filter((candidate) => fits(candidate, value));
    const branch = fitting.find((candidate) => !('const' in candidate) || candidate.const === value);
    // A value of a literal's type but not the literal (true for `name or false`) is told what the whole union takes.
    if (!branch) {
      mismatch(schema, value, path, context);
      return value;
    }
    return validateValue(branch as TSchema, value, context, path);
  }
  if ('const' in schema) {
    if (value !== schema.const) report(context, path, `expected ${JSON.stringify(schema.const)}, got ${describeValue(value)}`);
    return value;
  }
  switch (schema.type) {
    case 'object': return walkObject(schema, value as Record<string, unknown>, path, context);
    case 'array': return walkArray(schema, value as unknown[], path, context);
    case 'string':
      if (!checked) checkString(schema, value as string, path, context);
      return value;
    case 'integer':
    case 'number':
      checkNumber(schema, value as number, path, context);
      return value;
    default: return value;
  }
}

function walkObject(schema: Schema, value: Record<string, unknown>, path: Path, context: ValidationContext): Record<string, unknown> {
  const result: Record<string, unknown> = {};
  const properties = schema.properties as Record<string, Schema> | undefined;
  if (!properties) {
    const valueSchema = Object.values(schema.patternProperties as Record<string, Schema>)[0];
    for (const [key, entry] of Object.entries(value)) result[key] = validateValue(valueSchema as TSchema, entry, context, [...path, key]);
    return result;
  }
  const fields = Object.keys(properties);
  for (const [key, entry] of Object.entries(value)) {
    if (Object.hasOwn(properties, key)) {
      result[key] = validateValue(properties[key] as TSchema, entry, context, [...path, key]);
      continue;
    }
    const suggestion = closestMatch(key, fields);
    const hint = context.unknownFieldHint?.(path, key) ?? null;
    const guess = suggestion ? `did you mean "${suggestion}"?` : null;
    const message = hint !== null ? [hint, guess].filter((part) => part !== null).join('; ')
      : guess !== null ? `unknown field; ${guess}` : `unknown field; expected one of ${fields.join(', ')}`;
    report(context, [...path, key], message, 'key');
  }
  for (const key of (schema.required as string[] | undefined) ?? []) {
    if (!Object.hasOwn(value, key)) report(context, [...path, key], `required field is missing; expected ${expectedOf(properties[key])}`, 'parent');
  }
  return result;
}

function walkArray(schema: Schema, value: unknown[], path: Path, context: ValidationContext): unknown[] {
  const minItems = schema.minItems as number | undefined;
  if (minItems !== undefined && value.length < minItems) {
    report(context, path, `expected at least ${minItems} ${minItems === 1 ? 'item' : 'items'}, got an empty list`);
  }
  const result = value.map((item, index) => validateValue(schema.items as TSchema, item, context, [...path, index]));
  if (schema.uniqueItems === true) {
    value.forEach((item, index) => {
      if (value.indexOf(item) < index) report(context, [...path, index], `${describeValue(item)} is listed twice`);
    });
  }
  return result;
}

function checkString(schema: Schema, value: string, path: Path, context: ValidationContext): void {
  const secret = schema['x-secret'] === true;
  if (typeof schema.minLength === 'number' && value.length < schema.minLength) {
    report(context, path, value.length === 0 ? 'expected a non-empty string' : `expected at least ${schema.minLength} characters`);
  } else if (typeof schema.maxLength === 'number' && value.length > schema.maxLength) {
    report(context, path, `expected at most ${schema.maxLength} characters, got ${value.length}`);
  } else {
    const form = mismatchedForm(schema, value);
    if (form === null) return;
    const expected = schema['x-expected'];
    report(context, path, typeof expected === 'string' ? `expected ${expected}, got ${describeValue(value, secret)}` : `${describeValue(value, secret)} does not match ${form}`);
  }
}

/** The pattern or format a string fails, or null. */
function mismatchedForm(schema: Schema, value: string): string | null {
  if (typeof schema.pattern === 'string' && !new RegExp(schema.pattern).test(value)) return `the pattern ${schema.pattern}`;
  if (typeof schema.format === 'string' && !FormatRegistry.Get(schema.format)?.(value)) return `the format ${schema.format}`;
  return null;
}

function checkNumber(schema: Schema, value: number, path: Path, context: ValidationContext): void {
  const min = schema.minimum as number | undefined;
  const max = schema.maximum as number | undefined;
  const exclusiveMin = schema.exclusiveMinimum as number | undefined;
  const outside = (min !== undefined && value < min) || (max !== undefined && value > max) || (exclusiveMin !== undefined && value <= exclusiveMin);
  if (outside) mismatch(schema, value, path, context);
}
