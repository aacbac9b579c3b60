import type { CAC } from 'cac';
import { parseDuration } from '../../api/duration.js';
import { GPU_MODELS } from '../../backends/gpucloud/api.js';
import { DEFAULT_CAPACITY_PER_MODEL } from '../../backends/gpucloud/catalog.js';
import { AGENT_KINDS, type AgentKind } from '../../backends/gpucloud/agent-kinds.js';
import type { EmulatorOptions } from '../../backends/gpucloud/emulator.js';
import { portFlag } from '../args.js';

interface EmulatorFlags {
  port: unknown;
  host: unknown;
  apiKey?: unknown;
  bootDelay: unknown;
  capacity: unknown;
  soldOut?: unknown;
  runtime: unknown;
  workDir?: unknown;
  stateDir?: unknown;
  cpuOffers?: boolean;
  agents: unknown;
  jobStartDelay?: unknown;
  jobStopDelay?: unknown;
}

const RUNTIMES = ['process', 'docker', 'auto'] as const;

export function registerGpucloudEmulator(cli: CAC): void {
  cli.command('gpucloud-emulator', 'Serve an emulated gpucloud API on this machine; every instance boots a real agent process, or a simulated one (--agents simulated)')
    .option('--port <port>', 'Port to listen on', { default: 8090 })
    .option('--host <host>', 'Address to listen on', { default: '127.0.0.1' })
    .option('--api-key <key>', 'API key clients must send (default: the one kept in --state-dir, else a random one, printed)')
    .option('--boot-delay <duration>', 'How long an instance provisions before its agent starts, e.g. 500ms, 3s', { default: '3s' })
    .option('--capacity <n>', 'Instances per GPU model that may exist at once', { default: DEFAULT_CAPACITY_PER_MODEL })
    .option('--sold-out <models>', `GPU models without capacity: a comma list of ${GPU_MODELS.join(', ')}, or *`)
    .option('--cpu-offers', 'Also sell a machine without GPUs in each region (cpu-x0-<region>, $0.05/h), as gpucloud gateways rent')
    .option('--runtime <runtime>', 'How agents run jobs: process, docker or auto', { default: 'process' })
    .option('--agents <kind>', 'process: each instance boots a real agent process; simulated: this process answers every instance\'s agent API and plays its jobs (thousands of instances on one machine)', { default: process.env.ORCHESTRATOR_EMULATOR_AGENTS ?? 'process' })
    .option('--job-start-delay <duration>', 'With --agents simulated: how long a job takes from submission to running, e.g. 50ms')
    .option('--job-stop-delay <duration>', 'With --agents simulated: how long a job takes to exit after SIGTERM, e.g. 100ms')
    .option('--work-dir <dir>', 'Folder for the agents\' files (default: DIR/agents with --state-dir, else a temporary folder, removed on exit)')
    .option('--state-dir <dir>', 'Keep the API key and the instances here: a restart with the same folder takes them back, and instances run on while it is stopped')
    .example('orchestrator gpucloud-emulator --boot-delay 1s --capacity 2 --sold-out H200')
    .action(async (flags: EmulatorFlags) => {
      try {
        await runEmulator(flags);
      } catch (error) {
        const hint = (error as Error).name === 'PortInUseError' ? ' --port picks another' : '';
        console.error(`error: ${(error as Error).message}${hint}`);
        process.exitCode = 1;
      }
    });
}

async function runEmulator(flags: EmulatorFlags): Promise<void> {
  const options = emulatorOptions(flags);
  const soldOut = parseModels(flags.soldOut);
  const { startEmulator } = await import('../../backends/gpucloud/emulator.js');
  const emulator = await startEmulator({
    ...options,
    log: (line) => console.log(`${new Date().toISOString()} ${line}`),
  });
  for (const model of soldOut) emulator.faults.noCapacity.add(model);
  const generatedKey = options.apiKey === undefined;
  console.log(`gpucloud emulator listening on ${emulator.url}`);
  if (generatedKey) console.log(`API key: ${emulator.apiKey}`);
  if (options.stateDir !== undefined) console.log(`state kept in ${options.stateDir}: instances run on while the emulator is stopped, and a restart with --state-dir ${options.stateDir} takes them back`);
  console.log([
    '',
    'Add this backend to the project in the server\'s config.yml, beside the ones it has, then restart the server:',
    'projects:',
    '- name: main',
    '  backends:',
    '  - type: local',
    '  - type: gpucloud',
    `    api_url: ${emulator.url}`,
    '    creds:',
    '      type: api_key',
    `      api_key: ${generatedKey ? emulator.apiKey : '<the key given with --api-key>'}`,
    '',
  ].join('\n'));
  await new Promise<void>((resolve) => {
    const stop = (signal: NodeJS.Signals) => {
      console.log(options.stateDir === undefined ? `${signal}: stopping all instances` : `${signal}: stopping; the instances run on`);
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      // A second signal while the agents stop would leave them and the temporary folders behind.
      process.on('SIGINT', stillStopping);
      process.on('SIGTERM', stillStopping);
      resolve();
    };
    process.on('SIGINT', stop);
    process.on('SIGTERM', stop);
  });
  await emulator.close();
}

function emulatorOptions(flags: EmulatorFlags): EmulatorOptions {
  const port = portFlag(flags.port);
  const capacityPerModel = Number(flags.capacity);
  if (!Number.isInteger(capacityPerModel) || capacityPerModel < 0) {
    throw new Error(`--capacity must be a whole number >= 0, got ${String(flags.capacity)}`);
  }
  const agents = String(flags.agents);
  if (!(AGENT_KINDS as readonly string[]).includes(agents)) throw new Error(`--agents must be one of ${AGENT_KINDS.join(', ')}, got ${agents}`);
  const runtime = String(flags.runtime);
  if (!(RUNTIMES as readonly string[]).includes(runtime)) throw new Error(`--runtime must be one of ${RUNTIMES.join(', ')}, got ${runtime}`);
  return {
    port,
    host: String(flags.host),
    ...(flags.apiKey === undefined ? {} : { apiKey: String(flags.apiKey) }),
    bootDelayMs: parseDelayMs(String(flags.bootDelay)),
    capacity: Object.fromEntries(GPU_MODELS.map((model) => [model, capacityPerModel])),
    agentRuntime: runtime as typeof RUNTIMES[number],
    agents: agents as AgentKind,
    simulated: {
      ...(flags.jobStartDelay === undefined ? {} : { startMs: parseDelayMs(String(flags.jobStartDelay)) }),
      ...(flags.jobStopDelay === undefined ? {} : { stopMs: parseDelayMs(String(flags.jobStopDelay)) }),
    },
    cpuOffers: flags.cpuOffers === true,
    ...(flags.workDir === undefined ? {} : { workDir: String(flags.workDir) }),
    ...(flags.stateDir === undefined ? {} : { stateDir: String(flags.stateDir) }),
  };
}

function stillStopping(signal: NodeJS.Signals): void {
  console.log(`${signal}: still stopping the instances' agents, which takes a few seconds at most`);
}

/** A duration as `orchestrator` reads them (3s, 1m, a bare number of seconds), or milliseconds such as 500ms. */
function parseDelayMs(text: string): number {
  const milliseconds = /^(\d+)ms$/.exec(text.trim());
  return milliseconds ? Number(milliseconds[1]) : parseDuration(text) * 1000;
}

function parseModels(value: unknown): string[] {
  if (value === undefined) return [];
  const models = String(value).split(',').map((model) => model.trim()).filter(Boolean);
  for (const model of models) {
    if (model !== '*' && !(GPU_MODELS as readonly string[]).includes(model)) {
      throw new Error(`--sold-out: unknown GPU model ${model} (known: ${GPU_MODELS.join(', ')}, or *)`);
    }
  }
  return models;
}
