import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LocalBackend } from '../../backends/local/local.js';
import { startServer, type RunningServer, type ServerOptions } from '../../server/server.js';
import { openDatabase } from '../../store/open.js';
import { createScratchDatabase, type DatabaseKind } from './databases.js';

export interface TestServer extends RunningServer {
  dir: string;
  databaseUrl: string | undefined;
  /** Calls the management API as the admin; returns status and parsed JSON. */
  api(method: string, path: string, body?: unknown, token?: string): Promise<{ status: number; body: any }>;
  /**
   * Closes the server and starts it again on the same folder and database (a new URL), with `options` for this start;
   * `api` and `stop` follow it.
   */
  restart(options?: ServerOptions): Promise<void>;
  stop(): Promise<void>;
}

export const FAST_TIMINGS = { provisioningTimeoutMs: 30_000, unreachableGraceMs: 3000, healthIntervalMs: 500, orphanSweepMs: 2000 };

/**
 * A migrated PGlite data folder, made once per version of the migrations and copied for each server:
 * a new PGlite folder costs seconds of CPU (initdb in WebAssembly), a copy a few milliseconds.
 */
export async function pgliteTemplate(): Promise<string> {
  const migrations = readFileSync(fileURLToPath(new URL('../../store/migrations.ts', import.meta.url)));
  const template = join(tmpdir(), `orch-pglite-template-${createHash('sha256').update(migrations).digest('hex').slice(0, 16)}`);
  if (existsSync(template)) return template;
  const making = mkdtempSync(join(tmpdir(), 'orch-pglite-making-'));
  await (await openDatabase({ dataDir: making })).close();
  try {
    renameSync(making, template);
  } catch {
    rmSync(making, { recursive: true, force: true });
  }
  return template;
}

/** A server on a free loopback port with its own folder and database, and the config given. */
export async function startTestServer(kind: DatabaseKind, config: string, options: ServerOptions = {}): Promise<TestServer> {
  const dir = mkdtempSync(join(tmpdir(), 'orch-server-'));
  writeFileSync(join(dir, 'config.yml'), config);
  if (kind === 'pglite') cpSync(await pgliteTemplate(), join(dir, 'data'), { recursive: true });
  const scratch = kind === 'postgres' ? await createScratchDatabase() : null;
  const start = (restartOptions: ServerOptions = {}) => startServer({
    port: 0, dir, databaseUrl: scratch?.url, adminToken: 'test-admin-token', logLevel: 'error',
    instanceTimings: FAST_TIMINGS, controllerIntervalMs: 200, ledgerIntervalMs: 1000, ...options, ...restartOptions,
  });
  let server = await start();
  // Through `server` as it is now: a restart moves it to another port.
  const api: TestServer['api'] = (...args) => managementApi(server)(...args);
  const handle: TestServer = {
    ...server,
    dir,
    databaseUrl: scratch?.url,
    api,
    restart: async (restartOptions) => {
      await server.close();
      server = await start(restartOptions);
      Object.assign(handle, { url: server.url, db: server.db, close: server.close });
    },
    stop: async () => {
      await server.close();
      const local = new LocalBackend({ stateDir: join(dir, 'backends', 'local') });
      for (const instance of await local.list()) await local.terminate(instance.id);
      await scratch?.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  return handle;
}

/** Calls a server's management API, as the admin unless another token is given; returns status and parsed JSON. */
export function managementApi(server: Pick<RunningServer, 'url' | 'adminToken'>): TestServer['api'] {
  return async (method, path, body, token = server.adminToken) => {
    const response = await fetch(`${server.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  };
}

export const LOCAL_CONFIG = `projects:
- name: main
  backends:
  - type: local
    runtime: process
`;

/** The local backend running jobs in containers, through the engine that DOCKER_HOST names when the server starts. */
export const LOCAL_DOCKER_CONFIG = `projects:
- name: main
  backends:
  - type: local
    runtime: docker
`;

function gpucloudBackend(apiUrl: string, apiKey: string): string {
  return `  - type: gpucloud
    api_url: ${apiUrl}
    creds:
      type: api_key
      api_key: ${apiKey}
`;
}

export function gpucloudConfig(apiUrl: string, apiKey: string): string {
  return `projects:\n- name: main\n  backends:\n${gpucloudBackend(apiUrl, apiKey)}`;
}

/** Project `main` with two backends: local processes and the gpucloud emulator at `apiUrl`. */
export function localAndGpucloudConfig(apiUrl: string, apiKey: string): string {
  return `projects:\n- name: main\n  backends:\n  - type: local\n    runtime: process\n${gpucloudBackend(apiUrl, apiKey)}`;
}

/**
 * Waits for a run to reach one of `statuses`; on a timeout the error says where the run stood and what happened to it
 * (its events with their times), not only that it did not get there.
 */
export async function runReaches(server: Pick<TestServer, 'api'>, name: string, statuses: string[], timeoutMs = 30_000): Promise<any> {
  try {
    return await eventually(async () => {
      const { body } = await server.api('GET', `/api/projects/main/runs/${name}`);
      return statuses.includes(body.status) ? body : null;
    }, timeoutMs, `run ${name} to reach ${statuses.join('/')}`);
  } catch (error) {
    const run = (await server.api('GET', `/api/projects/main/runs/${name}`)).body;
    const events = (await server.api('GET', `/api/projects/main/events?kind=run&object=${name}`)).body;
    const instanceEvents = (await server.api('GET', '/api/projects/main/events?kind=instance')).body;
    const instances = (await server.api('GET', '/api/projects/main/instances?all=true')).body;
    const told = (list: unknown) => Array.isArray(list)
      ? list.map((e: { createdAt: string; objectName: string; reason: string; message: string }) => `${e.createdAt} ${e.objectName} ${e.reason}: ${e.message}`).join(' | ') || 'none'
      : 'none';
    const where = Array.isArray(instances) ? instances.map((i: { name: string; status: string; statusMessage: string }) => `${i.name} ${i.status} (${i.statusMessage})`).join(', ') : '';
    throw new Error(`${(error as Error).message}; the run is ${run?.status} (${run?.statusMessage}) at ${new Date().toISOString()}, its events: ${told(events)}; `
      + `the instances: ${where || 'none'}, their events: ${told(instanceEvents)}`);
  }
}

/** Polls until `check` returns a value, or fails with what it saw last. */
export async function eventually<T>(check: () => Promise<T | undefined | null | false>, timeoutMs = 20_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < deadline) {
    try {
      const value = await check();
      if (value) return value;
      last = value;
    } catch (error) {
      last = error;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last: ${last instanceof Error ? last.message : JSON.stringify(last)}`);
}
