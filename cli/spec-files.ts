import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { formatSpecError, parseSpecText, specKind, type SpecError } from '../api/parse.js';
import type { AnySpec } from '../api/spec.js';
import { CliError } from './errors.js';

export interface LoadedSpec {
  spec: AnySpec;
  /** The file it came from, as given on the command line. */
  file: string;
  /** Where relative paths in the spec (task files) start. */
  baseDir: string;
}

/** The YAML files a -f argument names: the file itself, or a folder's *.yml and *.yaml files in name order. */
function filesOf(path: string): string[] {
  let stats;
  try {
    stats = statSync(path);
  } catch {
    throw new CliError(`${path}: no such file or folder`);
  }
  if (!stats.isDirectory()) return [path];
  const files = readdirSync(path)
    .filter((name) => /\.ya?ml$/i.test(name))
    .sort()
    .map((name) => join(path, name))
    .filter((file) => statSync(file).isFile());
  if (files.length === 0) throw new CliError(`${path}: the folder has no .yml or .yaml files`);
  return files;
}

/**
 * Reads and validates every configuration in `paths` before anything is sent, with bare `env`
 * names resolved from `environment`. Returns fleets first, then runs, each in file order, or
 * every problem found, formatted as `file:line:column: field: message`.
 */
export function loadSpecs(paths: readonly string[], environment: Record<string, string | undefined>): { specs: LoadedSpec[]; errors: string[] } {
  const specs: LoadedSpec[] = [];
  const errors: SpecError[] = [];
  const seen = new Map<string, string>();
  for (const file of [...new Set(paths.flatMap(filesOf))]) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (error) {
      throw new CliError(`${file}: cannot read it: ${(error as Error).message}`);
    }
    const parsed = parseSpecText(text, file, environment);
    errors.push(...parsed.errors);
    for (const spec of parsed.specs) {
      if (spec.name !== undefined) {
        const key = `${specKind(spec)}:${spec.name}`;
        const earlier = seen.get(key);
        if (earlier !== undefined) {
          errors.push({ file, line: null, column: null, path: 'name', message: `the ${specKind(spec)} name "${spec.name}" is also used in ${earlier}` });
          continue;
        }
        seen.set(key, file);
      }
      specs.push({ spec, file, baseDir: dirname(file) });
    }
  }
  if (errors.length > 0) return { specs: [], errors: errors.map(formatSpecError) };
  const fleets = specs.filter((s) => s.spec.type === 'fleet');
  const runs = specs.filter((s) => s.spec.type !== 'fleet');
  return { specs: [...fleets, ...runs], errors: [] };
}
