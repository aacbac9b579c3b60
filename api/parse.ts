import { Type, type Static, type TObject } from '@sinclair/typebox';
import { isAlias, isMap, isScalar, isSeq, LineCounter, parseAllDocuments, type Document } from 'yaml';
import { interpolateSpec } from './interpolation.js';
import { checkGatewayRules, GatewaySpec } from './gateways.js';
import { checkSpecRules, otherKindsHint, refuseUnsupported, UNSUPPORTED_TYPES } from './spec-rules.js';
import { SPEC_SCHEMAS, type AnySpec, type SpecType } from './spec.js';
import { isDnsLabel } from './names.js';
import { closestMatch, quoteList } from './suggest.js';
import type { IssueAt, Path } from './issue-place.js';
import { describeValue, report, reportNulCharacters, validateValue, type Issue, type ValidationContext } from './validate.js';

/** One problem in a configuration, with where it is: `file` and `line` are null for specs that did not come from a file. */
export const SpecError = Type.Object({
  file: Type.Union([Type.String(), Type.Null()]),
  line: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
  column: Type.Union([Type.Integer({ minimum: 1 }), Type.Null()]),
  path: Type.String({ description: 'The field, such as resources.gpu or commands[2]; empty for the document as a whole' }),
  message: Type.String(),
});
export type SpecError = Static<typeof SpecError>;

/** `resources.gpu`, `commands[2]`, `env["odd key"]`. */
export function formatPath(path: Path): string {
  return path.map((segment, index) => {
    if (typeof segment === 'number') return `[${segment}]`;
    if (/^[A-Za-z_][A-Za-z0-9_-]*$/.test(segment)) return index === 0 ? segment : `.${segment}`;
    return `[${JSON.stringify(segment)}]`;
  }).join('');
}

/** `hello.yml:4:3: resources.gpu: unknown GPU model "H10"; did you mean "H100"?` */
export function formatSpecError(e: SpecError): string {
  const place = e.file === null ? '' : e.line === null ? e.file : `${e.file}:${e.line}:${e.column}`;
  return [place, e.path, e.message].filter((part) => part !== '').join(': ');
}

/** Every kind a configuration file may hold: the kinds of runs and fleets, which are also custom resources, and gateways. */
export type ConfigSpec = AnySpec | GatewaySpec;
export type ConfigType = ConfigSpec['type'];
const CONFIG_SCHEMAS: Record<ConfigType, TObject> = { ...SPEC_SCHEMAS, gateway: GatewaySpec };
const CONFIG_TYPES = Object.keys(CONFIG_SCHEMAS) as ConfigType[];

export function specKind(spec: { type: ConfigType }): 'fleet' | 'gateway' | 'run' {
  return spec.type === 'fleet' || spec.type === 'gateway' ? spec.type : 'run';
}

function checkDocument(value: unknown, environment: ValidationContext['environment'], runArgs: readonly string[] = []): { spec: ConfigSpec | null; issues: Issue[] } {
  const issues: Issue[] = [];
  const context: ValidationContext = { environment, issues };
  const types = quoteList(CONFIG_TYPES);
  reportNulCharacters(value, context);
  if (issues.length > 0) return { spec: null, issues };
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    report(context, [], `expected a map with a type field (${types}), got ${describeValue(value)}`);
    return { spec: null, issues };
  }
  const type = (value as Record<string, unknown>).type;
  if (type === undefined) {
    report(context, ['type'], `required field is missing; expected one of ${types}`, 'parent');
    return { spec: null, issues };
  }
  if (typeof type === 'string' && Object.hasOwn(UNSUPPORTED_TYPES, type)) {
    report(context, ['type'], `dstack's ${type} configurations are not supported: ${UNSUPPORTED_TYPES[type]}`);
    return { spec: null, issues };
  }
  if (typeof type !== 'string' || !(CONFIG_TYPES as string[]).includes(type)) {
    const suggestion = typeof type === 'string' ? closestMatch(type, CONFIG_TYPES) : null;
    report(context, ['type'], `expected one of ${types}, got ${describeValue(type)}${suggestion ? `; did you mean "${suggestion}"?` : ''}`);
    return { spec: null, issues };
  }
  if (type === 'gateway') {
    const spec = validateValue(GatewaySpec, value, context) as Record<string, unknown>;
    checkGatewayRules(spec, (path, message, at) => report(context, path, message, at));
    return { spec: issues.length === 0 ? (spec as GatewaySpec) : null, issues };
  }
  context.unknownFieldHint = (path, field) => otherKindsHint(path, field, type as SpecType, SPEC_SCHEMAS);
  const supported = refuseUnsupported(value as Record<string, unknown>, type as SpecType, SPEC_SCHEMAS[type as SpecType].properties, (path, message, at) => report(context, path, message, at));
  if (supported === null) return { spec: null, issues };
  const refused = new Set<string>();
  const interpolated = interpolateSpec(supported, environment === null ? null : { environment, args: runArgs }, (path, message) => {
    refused.add(formatPath(path));
    report(context, path, message);
  });
  const validatedFrom = issues.length;
  const spec = validateValue(SPEC_SCHEMAS[type as SpecType], interpolated, context) as Record<string, unknown>;
  // A field whose expression was refused gets that message alone, not also one about the text left in it.
  issues.splice(validatedFrom, Infinity, ...issues.slice(validatedFrom).filter((issue) => !refused.has(formatPath(issue.path))));
  checkSpecRules(spec, (path, message, at) => report(context, path, message, at));
  return { spec: issues.length === 0 ? (spec as AnySpec) : null, issues };
}

/**
 * Validates a spec that arrived as JSON (the server's API), with the same rules as files.
 * `env` must be a map or a list whose entries all carry values; the result has `env` as a map.
 */
export function validateSpec(value: unknown): { spec: ConfigSpec | null; errors: SpecError[] } {
  const { spec, issues } = checkDocument(value, null);
  return { spec, errors: issues.map((issue) => ({ file: null, line: null, column: null, path: formatPath(issue.path), message: issue.message })) };
}

function rangeStart(node: unknown): number | null {
  if (node === null || typeof node !== 'object' || !('range' in node)) return null;
  const range = (node as { range?: unknown }).range;
  return Array.isArray(range) ? (range[0] as number) : null;
}

function isEmpty(node: unknown): boolean {
  return node === null || node === undefined || (isScalar(node) && node.value === null);
}

/** Where an issue shows in the source: the offset of the key or value its path leads to, or the nearest ancestor found. */
function offsetOf(doc: Document, path: Path, at: IssueAt): number | null {
  const target = at === 'parent' ? path.slice(0, -1) : path;
  let node: unknown = doc.contents;
  let offset = rangeStart(node);
  for (let index = 0; index < target.length; index++) {
    if (isAlias(node)) node = node.resolve(doc);
    const segment = target[index];
    const last = index === target.length - 1;
    if (isMap(node)) {
      const pair = node.items.find((item) => String(isScalar(item.key) ? item.key.value : item.key) === String(segment));
      if (!pair) break;
      const keyOffset = rangeStart(pair.key) ?? offset;
      if (last && (at !== 'value' || isEmpty(pair.value))) return keyOffset;
      node = pair.value;
      offset = rangeStart(node) ?? keyOffset;
    } else if (isSeq(node) && typeof segment === 'number' && segment < node.items.length) {
      node = node.items[segment];
      offset = rangeStart(node) ?? offset;
    } else {
      break;
    }
  }
  return offset;
}

/** Two documents of one file may not name the same fleet, or the same run. */
function checkNameUnique(
  value: unknown,
  seen: Map<string, number | null>,
  locate: () => { offset: number | null; line: number | null },
): { offset: number | null; message: string } | null {
  const { type, name } = (value ?? {}) as { type?: unknown; name?: unknown };
  if (typeof name !== 'string' || !isDnsLabel(name) || typeof type !== 'string' || !(CONFIG_TYPES as string[]).includes(type)) return null;
  const kind = specKind({ type: type as ConfigType });
  const key = `${kind}:${name}`;
  const place = locate();
  if (!seen.has(key)) {
    seen.set(key, place.line);
    return null;
  }
  const firstLine = seen.get(key);
  return { offset: place.offset, message: `another ${kind} in this file is already named "${name}"${firstLine === null ? '' : ` (line ${firstLine})`}` };
}

function lowerFirst(text: string): string {
  return text.charAt(0).toLowerCase() + text.slice(1);
}

/**
 * Parses a file of one or more YAML documents (separated by `---`) into validated specs.
 * Reports every problem at once, each with its line, column and field. `env` entries written as
 * a bare NAME take their value from `environment`, the applying user's, and so do `${{ env.NAME }}`
 * expressions; `${{ run.args }}` takes `runArgs`, the words after `apply ... --`.
 */
export function parseSpecText(
  text: string, file: string, environment: Record<string, string | undefined>, runArgs: readonly string[] = [],
): { specs: ConfigSpec[]; errors: SpecError[] } {
  const lineCounter = new LineCounter();
  const docs = parseAllDocuments(text, { lineCounter, prettyErrors: false });
  const specs: ConfigSpec[] = [];
  const errors: SpecError[] = [];
  const errorAt = (offset: number | null, path: Path, message: string): void => {
    const position = offset === null ? null : lineCounter.linePos(offset);
    errors.push({ file, line: position?.line ?? null, column: position?.col ?? null, path: formatPath(path), message });
  };
  const names = new Map<string, number | null>();
  let documents = 0;
  for (const doc of docs) {
    if (doc.errors.length > 0) {
      const first = doc.errors[0];
      errorAt(first.pos[0], [], `invalid YAML: ${lowerFirst(first.message)}`);
      continue;
    }
    if (isEmpty(doc.contents)) continue;
    documents++;
    let value: unknown;
    try {
      value = doc.toJS({ maxAliasCount: 100 });
    } catch (error) {
      errorAt(rangeStart(doc.contents), [], `invalid YAML: ${lowerFirst((error as Error).message)}`);
      continue;
    }
    const { spec, issues } = checkDocument(value, environment, runArgs);
    for (const issue of issues) errorAt(offsetOf(doc, issue.path, issue.at), issue.path, issue.message);
    const duplicate = checkNameUnique(value, names, () => {
      const offset = offsetOf(doc, ['name'], 'value');
      return { offset, line: offset === null ? null : lineCounter.linePos(offset).line };
    });
    if (duplicate) errorAt(duplicate.offset, ['name'], duplicate.message);
    if (spec) specs.push(spec);
  }
  if (documents === 0 && errors.length === 0) errorAt(null, [], 'no configuration found; expected a YAML map with a type field');
  errors.sort((a, b) => (a.line ?? Infinity) - (b.line ?? Infinity) || (a.column ?? 0) - (b.column ?? 0));
  return { specs: errors.length === 0 ? specs : [], errors };
}
