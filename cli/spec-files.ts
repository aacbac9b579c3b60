import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { JobRepo } from '../api/agent.js';
import { formatSpecError, parseSpecText, specKind, type ConfigSpec, type SpecError } from '../api/parse.js';
import { CliError } from './errors.js';
import { collectRepos } from './repos.js';
import { collectFiles, uploadBudget, type UploadBudget, type UploadFile } from './upload.js';

export interface LoadedSpec {
  spec: ConfigSpec;
  /** The file it came from, as given on the command line. */
  file: string;
  /** The contents of the run's `files`, read when the configuration was loaded; none for a fleet or gateway. */
  files: UploadFile[];
  /** The run's `repos` as its instance checks them out (local ones read from this machine); none for a fleet or gateway. */
  repos: JobRepo[];
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

/** The run's `files` and `repos`, or the problem with them, prefixed with the configuration file it came from. */
function readFiles(spec: ConfigSpec, file: string, budget: UploadBudget): { files: UploadFile[]; repos: JobRepo[]; error: string | null } {
  if (spec.type === 'fleet' || spec.type === 'gateway') return { files: [], repos: [], error: null };
  try {
    const files = spec.files ? collectFiles(spec.files, dirname(file), budget) : [];
    return { files, repos: spec.repos ? collectRepos(spec.repos, dirname(file), budget) : [], error: null };
  } catch (error) {
    if (error instanceof CliError) return { files: [], repos: [], error: `${file}: ${error.message}` };
    throw error;
  }
}

/**
 * Reads and validates every configuration in `paths`, and reads every file its runs name, before
 * anything is sent, with bare `env` names and `${{ env.NAME }}` resolved from `environment` and
 * `${{ run.args }}` from `runArgs`. Returns gateways first, then fleets, then runs, each in file order, or every
 * problem found, formatted as `file:line:column: field: message`.
 */
export function loadSpecs(
  paths: readonly string[], environment: Record<string, string | undefined>, runArgs: readonly string[] = [],
): { specs: LoadedSpec[]; errors: string[] } {
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
    const parsed = parseSpecText(text, file, environment, runArgs);
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
      specs.push({ spec, file, files: [], repos: [] });
    }
  }
  const budget = uploadBudget();
  const fileErrors: string[] = [];
  for (const loaded of specs) {
    const { files, repos, error } = readFiles(loaded.spec, loaded.file, budget);
    loaded.files = files;
    loaded.repos = repos;
    if (error !== null) fileErrors.push(error);
  }
  if (errors.length > 0 || fileErrors.length > 0) return { specs: [], errors: [...errors.map(formatSpecError), ...fileErrors] };
  const order = (loaded: LoadedSpec) => ({ gateway: 0, fleet: 1, run: 2 })[specKind(loaded.spec)];
  return { specs: specs.sort((a, b) => order(a) - order(b)), errors: [] };
}
