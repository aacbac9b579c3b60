import type { CAC } from 'cac';
import { parseDurationOrOff } from '../../api/duration.js';
import { parseSize } from '../../api/quantity.js';
import type { RuntimeChoice } from '../../agent/server.js';
import { AGENT_TOKEN_VARIABLE } from '../../api/agent.js';

interface AgentFlags {
  host: string;
  port: string | number;
  runtime: string;
  gpu?: string;
  instanceId?: string;
  workDir?: string;
  orphanTimeout: string | number;
  exitWhenMissing?: string;
  maxLogSize: string | number;
}

/**
 * The value of a string flag exactly as typed. The argument parser turns number-like values into
 * numbers ("0012" → 12, "1e3" → 1000), which would corrupt ids and GPU specs.
 */
function rawFlag(argv: readonly string[], flag: string): string | undefined {
  let value: string | undefined;
  argv.forEach((argument, index) => {
    if (argument === flag && index + 1 < argv.length) value = argv[index + 1];
    else if (argument.startsWith(`${flag}=`)) value = argument.slice(flag.length + 1);
  });
  return value;
}

function fail(message: string): never {
  process.stderr.write(`orchestrator agent: ${message}\n`);
  process.exit(2);
}

/** Seconds of `--orphan-timeout`; 0 when it is off. */
function orphanTimeout(value: string): number {
  try {
    return parseDurationOrOff(value) ?? 0;
  } catch (error) {
    fail(`--orphan-timeout: ${(error as Error).message}`);
  }
}

/** Bytes of `--max-log-size`. */
function maxLogSize(value: string): number {
  try {
    const mib = parseSize(value);
    if (mib < 1) throw new Error('expected at least 1MB');
    return mib * 1024 * 1024;
  } catch (error) {
    fail(`--max-log-size: ${(error as Error).message}`);
  }
}

/** `orchestrator agent`: the program that runs jobs on an instance. Prints {"event":"listening","url":...} once ready. */
export function registerAgent(cli: CAC): void {
  cli
    .command('agent', 'Run the instance agent (token from ORCHESTRATOR_AGENT_TOKEN)')
    .option('--host <host>', 'Address to listen on', { default: '127.0.0.1' })
    .option('--port <port>', 'Port to listen on; 0 picks a free one', { default: 0 })
    .option('--runtime <runtime>', 'auto | docker | process', { default: 'auto' })
    .option('--gpu <spec>', 'GPUs to report, e.g. H100:80GB:2 (default: detected with nvidia-smi)')
    .option('--instance-id <id>', 'Instance id carried by this agent\'s containers (default: host name)')
    .option('--work-dir <dir>', 'Directory for job files and the agent log (default: a new temporary one)')
    .option('--orphan-timeout <duration>', 'Exit once no server has called for this long and no job runs (0 or off: never)', { default: '1h' })
    .option('--exit-when-missing <dir>', 'Exit, killing every job, once this directory is removed')
    .option('--max-log-size <size>', 'Log kept on disk per job; past it the oldest part is removed', { default: '1GB' })
    .action(async (flags: AgentFlags) => {
      const token = process.env[AGENT_TOKEN_VARIABLE];
      if (!token) fail(`${AGENT_TOKEN_VARIABLE} must be set to the token callers will present`);
      delete process.env[AGENT_TOKEN_VARIABLE];

      const argv = cli.rawArgs;
      const port = Number(flags.port);
      if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`invalid --port ${flags.port}: expected 0-65535`);
      const { RUNTIME_CHOICES, startAgent } = await import('../../agent/server.js');
      const runtime = String(flags.runtime) as RuntimeChoice;
      if (!RUNTIME_CHOICES.includes(runtime)) fail(`invalid --runtime ${flags.runtime}: expected ${RUNTIME_CHOICES.join(', ')}`);
      const orphanTimeoutSeconds = orphanTimeout(rawFlag(argv, '--orphan-timeout') ?? String(flags.orphanTimeout));

      // The agent outlives whoever started it: once that parent is gone, writes to its pipes fail
      // with EPIPE and a closing terminal sends SIGHUP. Neither may stop the jobs.
      process.stdout.on('error', () => undefined);
      process.stderr.on('error', () => undefined);
      process.on('SIGHUP', () => undefined);

      const agent = await startAgent({
        token,
        host: rawFlag(argv, '--host') ?? String(flags.host),
        port,
        runtime,
        gpu: rawFlag(argv, '--gpu'),
        instanceId: rawFlag(argv, '--instance-id'),
        workDir: rawFlag(argv, '--work-dir'),
        logToStderr: true,
        orphanTimeoutSeconds,
        exitWhenMissing: rawFlag(argv, '--exit-when-missing'),
        maxLogBytes: maxLogSize(rawFlag(argv, '--max-log-size') ?? String(flags.maxLogSize)),
      }).catch((error: Error) => fail(error.message));
      process.stdout.write(`${JSON.stringify({ event: 'listening', url: agent.url })}\n`);
      void agent.endedItself.then(() => process.exit(0));

      const shutdown = (signal: NodeJS.Signals) => {
        agent.logger.info('shutting down', { signal });
        agent.close().then(() => process.exit(0), () => process.exit(1));
      };
      process.once('SIGTERM', shutdown);
      process.once('SIGINT', shutdown);
    });
}
