import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { parse, stringify } from 'yaml';
import { CliError } from './errors.js';

export const ProjectSettings = Type.Object({
  name: Type.String({ minLength: 1 }),
  url: Type.String({ minLength: 1 }),
  token: Type.String({ minLength: 1 }),
  default: Type.Optional(Type.Boolean()),
}, { additionalProperties: false });
export type ProjectSettings = Static<typeof ProjectSettings>;

export const ClientConfig = Type.Object({
  projects: Type.Array(ProjectSettings),
}, { additionalProperties: false });
export type ClientConfig = Static<typeof ClientConfig>;

const PROJECT_NAME = /^[A-Za-z0-9][-A-Za-z0-9_.]*$/;

/** `~/.orchestrator/config.yml`, with HOME taken from the environment. */
export function configPath(): string {
  return join(process.env.HOME || homedir(), '.orchestrator', 'config.yml');
}

export function loadConfig(path = configPath()): ClientConfig {
  if (!existsSync(path)) return { projects: [] };
  let value: unknown;
  try {
    value = parse(readFileSync(path, 'utf8')) ?? { projects: [] };
  } catch (error) {
    throw new CliError(`${path} is not valid YAML: ${(error as Error).message}`);
  }
  const problem = Value.Errors(ClientConfig, value).First();
  if (problem) throw new CliError(`${path}: ${problem.path || 'the file'}: ${problem.message}; fix or remove the file, then run orchestrator project add`);
  return value as ClientConfig;
}

/** Writes the file readable by its owner only: it holds tokens. */
export function saveConfig(config: ClientConfig, path = configPath()): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, stringify(config), { mode: 0o600 });
  chmodSync(temporary, 0o600);
  renameSync(temporary, path);
}

export function checkProjectName(name: string): void {
  if (!PROJECT_NAME.test(name)) throw new CliError(`invalid project name "${name}"; use letters, digits, "-", "_" and "."`);
}

/** The server's base URL without a trailing slash; only http and https. */
export function normalizeUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new CliError(`invalid URL "${text}"; expected e.g. http://127.0.0.1:3000`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new CliError(`invalid URL "${text}"; expected an http:// or https:// address`);
  return url.toString().replace(/\/+$/, '');
}

/** Adds or replaces a project; the first one, or one added with `makeDefault`, becomes the default. */
export function withProject(config: ClientConfig, project: Omit<ProjectSettings, 'default'>, makeDefault: boolean): ClientConfig {
  const others = config.projects.filter((p) => p.name !== project.name);
  const replaced = config.projects.find((p) => p.name === project.name);
  const isDefault = makeDefault || others.length === 0 || replaced?.default === true || !others.some((p) => p.default);
  return {
    projects: [
      ...others.map((p) => ({ ...p, default: isDefault ? false : p.default === true })),
      { ...project, default: isDefault },
    ],
  };
}

export function withDefault(config: ClientConfig, name: string): ClientConfig {
  if (!config.projects.some((p) => p.name === name)) throw unknownProject(config, name);
  return { projects: config.projects.map((p) => ({ ...p, default: p.name === name })) };
}

/** The project named with --project, else the default one. */
export function selectProject(config: ClientConfig, name: string | undefined): ProjectSettings {
  if (config.projects.length === 0) {
    throw new CliError('no project configured; run orchestrator project add --name NAME --url URL --token TOKEN (the server prints them when it starts)');
  }
  if (name !== undefined) {
    const named = config.projects.find((p) => p.name === name);
    if (!named) throw unknownProject(config, name);
    return named;
  }
  const chosen = config.projects.find((p) => p.default) ?? (config.projects.length === 1 ? config.projects[0] : undefined);
  if (!chosen) throw new CliError(`no default project; pass --project NAME or run orchestrator project set-default NAME (configured: ${config.projects.map((p) => p.name).join(', ')})`);
  return chosen;
}

function unknownProject(config: ClientConfig, name: string): CliError {
  const known = config.projects.map((p) => p.name);
  return new CliError(`project ${name} is not configured${known.length ? ` (configured: ${known.join(', ')})` : ''}; add it with orchestrator project add --name ${name} --url URL --token TOKEN`);
}
