import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { DatabaseKind } from './databases.js';
import { eventually, LOCAL_CONFIG, startTestServer, type TestServer } from './server.js';
import type { ServerOptions } from '../../server/server.js';

/** The built command; run `npx tsc -p .` before the suites that use it. */
export const CLI_MAIN = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', 'dist', 'cli', 'main.js');

export interface CliOptions {
  /** HOME of the command, where it keeps ~/.orchestrator/config.yml. */
  home: string;
  env?: Record<string, string>;
  /** Written to stdin, which is then closed; stdin is a pipe, never a terminal. */
  input?: string;
  timeoutMs?: number;
  cwd?: string;
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface CliProcess {
  child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves once stdout or stderr matches, or fails with what was printed so far. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** Sends SIGINT, as Ctrl-C does, and waits for the process to end. */
  interrupt(): Promise<CliResult>;
  done: Promise<CliResult>;
}

export function makeHome(): { home: string; remove(): void } {
  const home = mkdtempSync(join(tmpdir(), 'orch-cli-home-'));
  return { home, remove: () => rmSync(home, { recursive: true, force: true }) };
}

function describe(args: readonly string[], stdout: string, stderr: string): string {
  return `orchestrator ${args.join(' ')}\n--- stdout ---\n${stdout}--- stderr ---\n${stderr}`;
}

/** Starts the CLI and returns at once; the process is killed when it outlives `timeoutMs`. */
export function startCli(args: readonly string[], options: CliOptions): CliProcess {
  const env: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: options.home, LANG: 'C.UTF-8', ...options.env };
  const child = spawn(process.execPath, [CLI_MAIN, ...args], { env, cwd: options.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk; listeners.forEach((l) => l()); });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk; listeners.forEach((l) => l()); });
  child.stdin!.end(options.input ?? '');
  const timeoutMs = options.timeoutMs ?? 60_000;
  let timedOut = false;
  const timer = setTimeout(() => { timedOut = true; child.kill('SIGKILL'); }, timeoutMs);
  const done = new Promise<CliResult>((resolvePromise, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      listeners.forEach((l) => l());
      if (timedOut) reject(new Error(`timed out after ${timeoutMs} ms: ${describe(args, stdout, stderr)}`));
      else resolvePromise({ code, signal, stdout, stderr });
    });
  });
  const waitFor = (pattern: RegExp, waitMs = 30_000) => new Promise<void>((resolvePromise, reject) => {
    const check = () => {
      if (pattern.test(stdout) || pattern.test(stderr)) finish(null);
      else if (child.exitCode !== null || child.signalCode !== null) finish(new Error(`exited before printing ${pattern}: ${describe(args, stdout, stderr)}`));
    };
    const timeout = setTimeout(() => finish(new Error(`no ${pattern} within ${waitMs} ms: ${describe(args, stdout, stderr)}`)), waitMs);
    const finish = (error: Error | null) => {
      clearTimeout(timeout);
      listeners.delete(check);
      if (error) reject(error);
      else resolvePromise();
    };
    listeners.add(check);
    check();
  });
  return {
    child,
    stdout: () => stdout,
    stderr: () => stderr,
    waitFor,
    interrupt: async () => {
      child.kill('SIGINT');
      return done;
    },
    done,
  };
}

/** Runs the CLI to the end. */
export async function runCli(args: readonly string[], options: CliOptions): Promise<CliResult> {
  return startCli(args, options).done;
}

/** `orchestrator project add` for the server's `main` project with the admin token. */
export async function addProject(home: string, url: string, token = 'test-admin-token', name = 'main'): Promise<CliResult> {
  const result = await runCli(['project', 'add', '--name', name, '--url', url, '--token', token], { home });
  if (result.code !== 0) throw new Error(`project add failed: ${describe(['project', 'add'], result.stdout, result.stderr)}`);
  return result;
}

export function show(result: CliResult): string {
  return `exit ${result.code ?? result.signal}\n--- stdout ---\n${result.stdout}--- stderr ---\n${result.stderr}`;
}

/** Deletes every fleet and waits for its instances to end, so that no agent process outlives a suite. */
export async function releaseInstances(server: TestServer): Promise<void> {
  const fleets = (await server.api('GET', '/api/projects/main/fleets')).body as { name: string }[];
  for (const fleet of fleets) await server.api('DELETE', `/api/projects/main/fleets/${fleet.name}`);
  await eventually(async () => {
    const instances = (await server.api('GET', '/api/projects/main/instances')).body as unknown[];
    return instances.length === 0;
  }, 20_000, 'every instance to terminate');
}

/** Ends what a CLI suite started: its instances, its server, its home and its work folder (any may be missing when `before` failed). */
export async function endCliSuite(server: TestServer | undefined, home: { remove(): void } | undefined, work?: string): Promise<void> {
  if (server) {
    await releaseInstances(server).catch(() => undefined);
    await server.stop();
  }
  home?.remove();
  if (work) rmSync(work, { recursive: true, force: true });
}

/** What a CLI suite on this machine works with: a server with the local backend, a HOME whose project main points at it, a work folder. */
export interface LocalCliSuite {
  server: TestServer;
  home: ReturnType<typeof makeHome>;
  work: string;
}

/**
 * Starts a LocalCliSuite with the local fleet (examples/fleets/local.yml) applied through the CLI; end it with endCliSuite.
 * The server's config is LOCAL_CONFIG (the process runtime) unless given, e.g. LOCAL_DOCKER_CONFIG.
 */
export async function startLocalCliSuite(kind: DatabaseKind, config = LOCAL_CONFIG, options: ServerOptions = {}): Promise<LocalCliSuite> {
  const server = await startTestServer(kind, config, options);
  const home = makeHome();
  const work = mkdtempSync(join(tmpdir(), 'orch-cli-work-'));
  await addProject(home.home, server.url);
  const fleet = await runCli(['apply', '-f', 'examples/fleets/local.yml', '-y'], { home: home.home, cwd: resolve(dirname(fileURLToPath(import.meta.url)), '..', '..') });
  if (fleet.code !== 0) throw new Error(`the local fleet was not applied: ${show(fleet)}`);
  return { server, home, work };
}
