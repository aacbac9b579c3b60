import type { Path } from './issue-place.js';

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

export type Report = (path: Path, message: string, at?: 'key' | 'value') => void;

function kindOf(value: unknown): string {
  if (value === null || value === undefined) return 'nothing';
  if (Array.isArray(value)) return 'a list';
  return typeof value === 'object' ? 'a map' : `a ${typeof value}`;
}

/**
 * Turns `env` as written (a list of NAME or NAME=value, or a map) into a map of strings.
 * A NAME without a value is taken from `environment`, the applying user's; where that is null
 * (a request that reached the server) every variable must carry its value already.
 * Values never appear in messages: they are often secrets.
 */
export function resolveEnv(
  value: unknown,
  environment: Record<string, string | undefined> | null,
  path: Path,
  report: Report,
): Record<string, string> {
  const result: Record<string, string> = {};
  const set = (name: string, given: string | null, at: Path, nameAt: 'key' | 'value'): void => {
    if (!ENV_NAME.test(name)) {
      report(at, `"${name}" is not a valid variable name; use letters, digits and _, not starting with a digit`, nameAt);
      return;
    }
    if (Object.hasOwn(result, name)) {
      report(at, `${name} is set twice`, nameAt);
      return;
    }
    if (given !== null) {
      result[name] = given;
      return;
    }
    const inherited = environment?.[name];
    if (inherited !== undefined) {
      result[name] = inherited;
    } else if (environment === null) {
      report(at, `${name} has no value; send it as ${name}=value`);
    } else {
      report(at, `${name} is not set in your environment; set it or write ${name}=value`);
    }
  };

  if (Array.isArray(value)) {
    value.forEach((entry, index) => {
      const at = [...path, index];
      if (typeof entry === 'string') {
        const separator = entry.indexOf('=');
        set(separator < 0 ? entry : entry.slice(0, separator), separator < 0 ? null : entry.slice(separator + 1), at, 'value');
      } else if (entry !== null && typeof entry === 'object' && !Array.isArray(entry) && Object.keys(entry).length === 1) {
        const name = Object.keys(entry)[0];
        report(at, `expected NAME or NAME=value, got a map; write ${name}=... as one string`);
      } else {
        report(at, `expected NAME or NAME=value, got ${kindOf(entry)}`);
      }
    });
    return result;
  }
  if (value !== null && typeof value === 'object') {
    for (const [name, entry] of Object.entries(value)) {
      const at = [...path, name];
      if (typeof entry === 'string') set(name, entry, at, 'key');
      else if (typeof entry === 'number' || typeof entry === 'boolean') set(name, String(entry), at, 'key');
      else if (entry === null) set(name, null, at, 'key');
      else report(at, `expected a value for ${name} (a string), got ${kindOf(entry)}`);
    }
    return result;
  }
  report(path, `expected a list of NAME or NAME=value, or a map of names to values, got ${kindOf(value)}`);
  return result;
}
