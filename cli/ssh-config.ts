import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RUN_LIST_LIMIT, type Run } from '../api/objects.js';
import type { ApiClient } from './client.js';
import { identityPath, sshDir } from './ssh-keys.js';

/** One `Host` of ~/.orchestrator/ssh/config: a run, or one replica of a service. */
export interface SshHostEntry {
  host: string;
  run: string;
  replica: number | null;
  hostAlias: string;
  hostKeys: string[];
}

/** What the files are made from: each project's reachable runs as its last refresh saw them. */
interface SshState {
  projects: Record<string, SshHostEntry[]>;
}

const statePath = () => join(sshDir(), 'hosts.json');
const declinedPath = () => join(sshDir(), 'include-declined');
export const sshConfigPath = () => join(sshDir(), 'config');
const knownHostsPath = () => join(sshDir(), 'known_hosts');
export const userSshConfigPath = () => join(process.env.HOME || homedir(), '.ssh', 'config');

/** The CLI's own entry point, run by ssh as the ProxyCommand: the same node and the same files, so no install on PATH is needed. */
const CLI_MAIN = resolve(dirname(fileURLToPath(import.meta.url)), 'main.js');

/** The hosts a project's runs give: each run that can be reached, and each of a service's replicas as `<run>-<n>`. */
export function hostEntries(runs: readonly Run[]): SshHostEntry[] {
  const reachable = runs.filter((run) => run.ssh !== null && run.ssh.hostKeys.length > 0);
  const names = new Set(reachable.map((run) => run.name));
  return reachable.flatMap((run) => [
    { host: run.name, run: run.name, replica: null, hostAlias: run.ssh!.hostAlias, hostKeys: run.ssh!.hostKeys },
    ...run.ssh!.replicas
      .filter((replica) => !names.has(`${run.name}-${replica.replica}`))
      .map((replica) => ({ host: `${run.name}-${replica.replica}`, run: run.name, replica: replica.replica, hostAlias: replica.hostAlias, hostKeys: replica.hostKeys })),
  ]);
}

/** A word as ssh_config reads it: `%` is its token character, and quotes keep spaces. */
function configWord(text: string): string {
  const escaped = text.replace(/%/g, '%%');
  return /[\s"]/.test(escaped) ? `"${escaped.replace(/"/g, '\\"')}"` : escaped;
}

/** A word as the shell that runs ProxyCommand reads it. */
function shellWord(text: string): string {
  return /^[\w/.,:@+=-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}

export function renderSshConfig(state: SshState): string {
  const blocks = Object.entries(state.projects).flatMap(([project, entries]) => entries.map((entry) => {
    const proxy = [process.execPath, CLI_MAIN, 'ssh-proxy', entry.run, '--project', project, ...(entry.replica === null ? [] : ['--replica', String(entry.replica)])];
    return [
      `Host ${entry.host}`,
      `  HostName ${entry.host}`,
      `  IdentityFile ${configWord(identityPath())}`,
      '  IdentitiesOnly yes',
      `  ProxyCommand ${proxy.map(shellWord).join(' ').replace(/%/g, '%%')}`,
      `  HostKeyAlias ${entry.hostAlias}`,
      `  UserKnownHostsFile ${configWord(knownHostsPath())}`,
      '  StrictHostKeyChecking yes',
      '',
    ].join('\n');
  }));
  return ['# Written by orchestrator: apply, ps and ssh-config rewrite it from the server, so edits here are lost.', '', ...blocks].join('\n');
}

export function renderKnownHosts(state: SshState): string {
  return Object.values(state.projects).flat().flatMap((entry) => entry.hostKeys.map((key) => `${entry.hostAlias} ${key}\n`)).join('');
}

function loadState(): SshState {
  if (!existsSync(statePath())) return { projects: {} };
  try {
    return JSON.parse(readFileSync(statePath(), 'utf8')) as SshState;
  } catch {
    return { projects: {} };
  }
}

function writeAtomically(path: string, text: string, mode: number): void {
  const temporary = `${path}.${process.pid}.tmp`;
  writeFileSync(temporary, text, { mode });
  chmodSync(temporary, mode);
  renameSync(temporary, path);
}

/**
 * Makes ~/.orchestrator/ssh/config and known_hosts hold the project's reachable runs as `runs` show them (the server's
 * list of the project's live runs), leaving other projects' entries alone: entries of runs that ended go, unless the
 * list is as long as the server makes it and does not name them (beyondTheList). Returns the project's hosts.
 */
export function refreshSshConfig(project: string, runs: readonly Run[]): SshHostEntry[] {
  const state = loadState();
  const listed = hostEntries(runs);
  const entries = [...listed, ...beyondTheList(state.projects[project] ?? [], runs, listed)];
  if (entries.length === 0 && !(project in state.projects)) return entries;
  const others = Object.fromEntries(Object.entries(state.projects).filter(([name]) => name !== project));
  const next: SshState = { projects: entries.length > 0 ? { [project]: entries, ...others } : others };
  mkdirSync(sshDir(), { recursive: true, mode: 0o700 });
  writeAtomically(knownHostsPath(), renderKnownHosts(next), 0o600);
  writeAtomically(sshConfigPath(), renderSshConfig(next), 0o600);
  writeAtomically(statePath(), `${JSON.stringify(next, null, 2)}\n`, 0o600);
  return entries;
}

/**
 * A list as long as the server's longest holds only the project's newest runs: the entries of runs it does not name may
 * be of older runs that still run, and stay until a shorter list leaves them out.
 */
function beyondTheList(previous: readonly SshHostEntry[], runs: readonly Run[], listed: readonly SshHostEntry[]): SshHostEntry[] {
  if (runs.length < RUN_LIST_LIMIT) return [];
  const names = new Set([...runs.map((run) => run.name), ...listed.map((entry) => entry.host)]);
  return previous.filter((entry) => !names.has(entry.run) && !names.has(entry.host));
}

/** Refreshes the project's entries from the server's list of its live runs; returns its hosts. */
export async function refreshFromServer(client: ApiClient): Promise<SshHostEntry[]> {
  return refreshSshConfig(client.project, await client.get<Run[]>(client.projectPath('/runs')));
}

/** A refresh that failed (a file that cannot be written) costs the ssh entries, never the command that refreshed. */
export function sshConfigWarning(error: unknown): void {
  process.stderr.write(`warning: could not refresh the ssh config: ${(error as Error).message}\n`);
}

/** The line that makes `ssh <run>` read our entries; absolute, because ssh expands `~` from the password database, not HOME. */
export function includeLine(): string {
  return `Include ${configWord(sshConfigPath())}`;
}

export function isIncluded(): boolean {
  const path = userSshConfigPath();
  if (!existsSync(path)) return false;
  return readFileSync(path, 'utf8').split('\n').some((line) => /^\s*Include\s/i.test(line) && line.includes(join('.orchestrator', 'ssh', 'config')));
}

/** The user said no to the Include once, on a terminal: apply does not ask again. */
export function includeDeclined(): boolean {
  return existsSync(declinedPath());
}

export function rememberIncludeDeclined(): void {
  mkdirSync(sshDir(), { recursive: true, mode: 0o700 });
  writeFileSync(declinedPath(), 'orchestrator ssh-config --include adds the Include line to ~/.ssh/config\n');
}

/** Puts the Include at the top of ~/.ssh/config (made owner-only when new), before any Host block can scope it. */
export function addInclude(): void {
  const path = userSshConfigPath();
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const current = existsSync(path) ? readFileSync(path, 'utf8') : '';
  const mode = existsSync(path) ? statSync(path).mode & 0o777 : 0o600;
  writeAtomically(path, `# Added by orchestrator: ssh <run> reaches the runs of your projects.\n${includeLine()}\n\n${current}`, mode);
}
