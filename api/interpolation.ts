import { closestMatch } from './suggest.js';
import type { Path } from './issue-place.js';

/** A secret's name: letters, digits, `_` and `-`, starting with a letter or `_`, at most 64 characters. */
export const SECRET_NAME_PATTERN = '^[A-Za-z_][A-Za-z0-9_-]{0,63}$';
export const SECRET_NAME_RULE = 'letters, digits, _ and -, starting with a letter or _, at most 64 characters';
const SECRET_NAME = new RegExp(SECRET_NAME_PATTERN);

/** What the CLI fills in when it applies; `null` where a spec arrives without them (the server's API). */
export interface InterpolationInputs {
  /** The applying user's environment, for `${{ env.NAME }}`. */
  environment: Record<string, string | undefined>;
  /** The words after `--` on the `apply` command line, for `${{ run.args }}`. */
  args: readonly string[];
}

type Expression = { kind: 'env'; name: string } | { kind: 'secrets'; name: string } | { kind: 'run.args' };
type Kind = Expression['kind'];

const OPEN = '${{';
const CLOSE = '}}';
const NAMESPACES = ['env', 'secrets', 'run'];
const EXPECTED = 'expected env.NAME, secrets.NAME or run.args';
const WHERE_THEY_WORK = 'env.NAME and secrets.NAME work in env values, registry_auth, probe headers and repos credentials; run.args in commands';

class InterpolationError extends Error {}

function parseExpression(inner: string): Expression {
  const text = inner.trim();
  if (text === 'run.args') return { kind: 'run.args' };
  const dot = text.indexOf('.');
  const namespace = dot < 0 ? text : text.slice(0, dot);
  const name = dot < 0 ? '' : text.slice(dot + 1);
  if (namespace === 'env' || namespace === 'secrets') {
    if (namespace === 'env' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(name)) return { kind: 'env', name };
    if (namespace === 'secrets' && SECRET_NAME.test(name)) return { kind: 'secrets', name };
    const rule = namespace === 'env' ? 'letters, digits and _, not starting with a digit' : SECRET_NAME_RULE;
    throw new InterpolationError(`"\${{ ${text} }}" does not name ${namespace === 'env' ? 'a variable' : 'a secret'}; after ${namespace}. write a name of ${rule}`);
  }
  const suggestion = closestMatch(namespace, NAMESPACES);
  const hint = suggestion && suggestion !== namespace ? `; did you mean "${suggestion === 'run' ? 'run.args' : `${suggestion}.${name || 'NAME'}`}"?` : '';
  throw new InterpolationError(`unknown expression "\${{ ${text} }}"; ${EXPECTED}${hint}`);
}

/** The pieces of a string: literal text and `${{ … }}` expressions, in order; throws on one that is unclosed or unknown. */
function pieces(text: string): Array<string | Expression> {
  const result: Array<string | Expression> = [];
  let at = 0;
  for (let open = text.indexOf(OPEN); open >= 0; open = text.indexOf(OPEN, at)) {
    const close = text.indexOf(CLOSE, open + OPEN.length);
    if (close < 0) throw new InterpolationError(`"${OPEN}" is not closed; write \${{ env.NAME }}, \${{ secrets.NAME }} or \${{ run.args }}`);
    if (open > at) result.push(text.slice(at, open));
    result.push(parseExpression(text.slice(open + OPEN.length, close)));
    at = close + CLOSE.length;
  }
  if (at < text.length) result.push(text.slice(at));
  return result;
}

/** One word for `sh`: as it is when it needs no quoting, otherwise in single quotes. */
export function shellQuote(word: string): string {
  if (word !== '' && /^[A-Za-z0-9_@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * Which expressions a field may hold, from its path as written (before `env` lists become maps):
 * run.args in commands; env and secrets in env values, registry_auth, probe headers and repos.
 */
function allowedAt(path: Path): Kind[] {
  const [field, index, sub, , leaf] = path;
  if (field === 'commands' && path.length === 2) return ['run.args'];
  const credentials: Kind[] = ['env', 'secrets'];
  if (field === 'env' && path.length === 2) return credentials;
  if (field === 'registry_auth' && path.length === 2) return credentials;
  if (field === 'probes' && typeof index === 'number' && sub === 'headers' && leaf === 'value' && path.length === 5) return credentials;
  if (field === 'repos' && typeof index === 'number') return credentials;
  return [];
}

function fieldName(path: Path): string {
  return path.filter((segment) => typeof segment === 'string').join('.') || 'this field';
}

function notAllowedMessage(expression: Expression, path: Path, allowed: Kind[]): string {
  const written = expression.kind === 'run.args' ? 'run.args' : `${expression.kind}.${expression.name}`;
  if (expression.kind === 'secrets' && allowed.includes('run.args')) {
    return `\${{ ${written} }} cannot be used in commands, which ps and plans show; pass it in env (${expression.name}: \${{ ${written} }}) and use $${expression.name.replaceAll('-', '_')}`;
  }
  if (expression.kind === 'run.args' && allowed.length > 0) return `\${{ run.args }} works in commands only`;
  return `\${{ ${written} }} is not supported in ${fieldName(path)}; ${WHERE_THEY_WORK}`;
}

/** The string with its expressions filled in; secrets stay as written, for the server to fill in when it makes the job. */
function interpolateString(text: string, path: Path, inputs: InterpolationInputs | null): string {
  const parts = pieces(text);
  if (parts.every((part) => typeof part === 'string')) return text;
  const allowed = allowedAt(path);
  return parts.map((part) => {
    if (typeof part === 'string') return part;
    if (!allowed.includes(part.kind)) throw new InterpolationError(notAllowedMessage(part, path, allowed));
    if (part.kind === 'secrets') return `\${{ secrets.${part.name} }}`;
    if (inputs === null) {
      throw new InterpolationError(`\${{ ${part.kind === 'env' ? `env.${part.name}` : 'run.args'} }} is filled in by the CLI when it applies a file; send the value itself`);
    }
    if (part.kind === 'run.args') return inputs.args.map(shellQuote).join(' ');
    const value = inputs.environment[part.name];
    if (value === undefined) throw new InterpolationError(`${part.name} is not set in your environment (\${{ env.${part.name} }}); set it before applying`);
    return value;
  }).join('');
}

/** An `env` list entry: only the value after `=` may hold expressions (a name that holds one is refused as a name). */
function interpolateEnvEntry(entry: string, path: Path, inputs: InterpolationInputs | null): string {
  const separator = entry.indexOf('=');
  const name = separator < 0 ? entry : entry.slice(0, separator);
  if (separator < 0 || name.includes(OPEN)) return entry;
  return `${name}=${interpolateString(entry.slice(separator + 1), path, inputs)}`;
}

/**
 * Fills in the `${{ … }}` expressions of a run's spec as written (before validation): env.NAME from the
 * applying user's environment and run.args from the apply command line; secrets.NAME are kept, checked.
 * Each problem is reported at its field, and never with the value it would have had.
 */
export function interpolateSpec(value: unknown, inputs: InterpolationInputs | null, report: (path: Path, message: string) => void): unknown {
  const visit = (current: unknown, path: Path): unknown => {
    if (typeof current === 'string') {
      if (!current.includes(OPEN)) return current;
      try {
        const envListEntry = path.length === 2 && path[0] === 'env' && typeof path[1] === 'number';
        return envListEntry ? interpolateEnvEntry(current, path, inputs) : interpolateString(current, path, inputs);
      } catch (error) {
        if (!(error instanceof InterpolationError)) throw error;
        report(path, error.message);
        return current;
      }
    }
    if (Array.isArray(current)) return current.map((item, index) => visit(item, [...path, index]));
    if (current !== null && typeof current === 'object') {
      return Object.fromEntries(Object.entries(current).map(([key, item]) => [key, visit(item, [...path, key])]));
    }
    return current;
  };
  return visit(value, []);
}

const SECRET_REFERENCE = /\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_-]{0,63})\s*\}\}/g;

/** The names of the secrets that strings anywhere in `value` refer to, each once. */
export function secretNamesIn(value: unknown): string[] {
  const names = new Set<string>();
  const visit = (current: unknown): void => {
    if (typeof current === 'string') {
      for (const match of current.matchAll(SECRET_REFERENCE)) names.add(match[1]!);
    } else if (current !== null && typeof current === 'object') {
      Object.values(current).forEach(visit);
    }
  };
  visit(value);
  return [...names];
}

/** A copy of `value` with every `${{ secrets.NAME }}` replaced by its value; every name must be in `secrets`. */
export function fillSecrets<T>(value: T, secrets: ReadonlyMap<string, string>): T {
  const visit = (current: unknown): unknown => {
    if (typeof current === 'string') return current.replace(SECRET_REFERENCE, (_, name: string) => secrets.get(name)!);
    if (Array.isArray(current)) return current.map(visit);
    if (current !== null && typeof current === 'object') return Object.fromEntries(Object.entries(current).map(([key, item]) => [key, visit(item)]));
    return current;
  };
  return visit(value) as T;
}

/** The parts of a job (api/agent.ts JobSubmission) where a run's spec may carry secrets: env values, registry and repo credentials. */
const SECRET_CARRYING_JOB_FIELDS = ['env', 'registryAuth', 'repos'];

function secretCarryingParts(job: object): Record<string, unknown> {
  return Object.fromEntries(Object.entries(job).filter(([key]) => SECRET_CARRYING_JOB_FIELDS.includes(key)));
}

/** The secrets a job needs filled in before it is sent to its agent. */
export function jobSecretNames(job: object): string[] {
  return secretNamesIn(secretCarryingParts(job));
}

/** The job with its secrets filled in where they may be; commands and the rest are left as they are. */
export function fillJobSecrets<T extends object>(job: T, secrets: ReadonlyMap<string, string>): T {
  return { ...job, ...fillSecrets(secretCarryingParts(job), secrets) };
}
