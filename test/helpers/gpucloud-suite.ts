import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Run } from '../../api/objects.js';
import type { FaultsPatch, GpucloudInstance } from '../../backends/gpucloud/api.js';
import { startEmulator, type RunningEmulator } from '../../backends/gpucloud/emulator.js';
import { addProject, makeHome, releaseInstances, runCli, show, type CliResult } from './cli.js';
import type { DatabaseKind } from './databases.js';
import { eventually, gpucloudConfig, startTestServer, type TestServer } from './server.js';

const REPO = resolve(import.meta.dirname, '..', '..');

/** A server whose project main rents from a gpucloud emulator, with a fleet of up to four L4 machines, driven through the CLI. */
export interface GpucloudSuite {
  emulator: RunningEmulator;
  server: TestServer;
  /** A folder for the suite's YAML files and for what its jobs (processes on this machine) leave behind. */
  work: string;
  cli(args: string[]): Promise<CliResult>;
  /** Writes a YAML file into `work` and applies it detached; throws when apply fails. */
  apply(name: string, yaml: string): Promise<CliResult>;
  /** The run as the API shows it (the newest attempt), finished or not; null when there is none. */
  run(name: string): Promise<Run | null>;
  waitFor(name: string, check: (run: Run) => boolean, what: string, timeoutMs?: number): Promise<Run>;
  /** Events of the run, `reason: message` each. */
  events(name: string): Promise<string[]>;
  /** POST /v1/_emulator/faults, as a test or a demo calls it over HTTP. */
  faults(patch: FaultsPatch): Promise<Response>;
  /** The emulator's instances, from GET /v1/_emulator/state. */
  cloudInstances(): Promise<GpucloudInstance[]>;
  end(): Promise<void>;
}

export async function startGpucloudSuite(kind: DatabaseKind): Promise<GpucloudSuite> {
  const emulator = await startEmulator({ port: 0, bootDelayMs: 100 });
  const server = await startTestServer(kind, gpucloudConfig(emulator.url, emulator.apiKey));
  const home = makeHome();
  const work = mkdtempSync(join(tmpdir(), 'orch-policies-'));
  await addProject(home.home, server.url);
  const control = (method: string, path: string, body?: unknown) => fetch(`${emulator.url}/_emulator/${path}`, {
    method, headers: { authorization: `Bearer ${emulator.apiKey}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const suite: GpucloudSuite = {
    emulator, server, work,
    cli: (args) => runCli(args, { home: home.home, cwd: REPO }),
    apply: async (name, yaml) => {
      const file = join(work, `${name}.yml`);
      writeFileSync(file, yaml);
      const applied = await suite.cli(['apply', '-f', file, '-y', '-d']);
      if (applied.code !== 0) throw new Error(`apply ${name} failed: ${show(applied)}`);
      return applied;
    },
    run: async (name) => {
      const answer = await server.api('GET', `/api/projects/main/runs/${name}`);
      return answer.status === 200 ? answer.body as Run : null;
    },
    waitFor: async (name, check, what, timeoutMs = 30_000) => {
      let last: Run | null = null;
      try {
        return await eventually(async () => {
          last = await suite.run(name);
          return last && check(last) ? last : null;
        }, timeoutMs, what);
      } catch (error) {
        throw new Error(`${(error as Error).message}; the run was ${JSON.stringify(last && { status: (last as Run).status, attempt: (last as Run).attempt, statusMessage: (last as Run).statusMessage })}`);
      }
    },
    events: async (name) => {
      const answer = await server.api('GET', `/api/projects/main/events?object=${name}`);
      return (answer.body as { reason: string; message: string }[]).map((event) => `${event.reason}: ${event.message}`);
    },
    faults: (patch) => control('POST', 'faults', patch),
    cloudInstances: async () => ((await (await control('GET', 'state')).json()) as { instances: GpucloudInstance[] }).instances,
    end: async () => {
      await releaseInstances(server).catch(() => undefined);
      await server.stop();
      await emulator.close();
      home.remove();
      rmSync(work, { recursive: true, force: true });
    },
  };
  await suite.apply('fleet', 'type: fleet\nname: l4\nbackends: [gpucloud]\nnodes: 0..4\nidle_duration: 1m\nresources:\n  gpu: L4\n');
  return suite;
}

/** Starts a GpucloudSuite before the describe block's tests (handing it to `use`) and ends it after them. */
export function useGpucloudSuite(kind: DatabaseKind, use: (suite: GpucloudSuite) => void): void {
  let suite: GpucloudSuite | undefined;
  before(async function () {
    this.timeout(60_000);
    suite = await startGpucloudSuite(kind);
    use(suite);
  });
  after(async function () {
    this.timeout(60_000);
    await suite?.end();
  });
}
