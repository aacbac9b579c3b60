import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { AGENT_TOKEN_VARIABLE } from '../api/agent.js';

/** How to start the `orchestrator` command from this installation, built (dist/) or from source through tsx. */
export function orchestratorCommand(): { command: string; args: string[] } {
  return nodeCommandFor(new URL('../cli/main.js', import.meta.url), new URL('../cli/main.ts', import.meta.url));
}

/** How to run one of this installation's modules as a Node process: its built file when there is one, else its source through tsx. */
export function nodeCommandFor(built: URL, source: URL): { command: string; args: string[] } {
  const builtPath = fileURLToPath(built);
  if (existsSync(builtPath)) return { command: process.execPath, args: [builtPath] };
  // By its path: the command may run in a folder (a job's) from which the package is not found.
  return { command: process.execPath, args: ['--import', pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href, fileURLToPath(source)] };
}

export interface AgentLaunch {
  token: string;
  instanceId: string;
  host?: string;
  /** e.g. "H100:80GB:2"; absent: detected with nvidia-smi. */
  gpu?: string;
  runtime?: 'auto' | 'docker' | 'process';
  workDir?: string;
  /** Seconds without a server's call after which the agent ends itself once idle; 0 never. Default: the agent's. */
  orphanTimeoutSeconds?: number;
  /** A directory whose removal ends the agent, jobs and all. */
  exitWhenMissing?: string;
  detached?: boolean;
  env?: NodeJS.ProcessEnv;
}

export interface StartedAgent {
  child: ChildProcess;
  url: string;
}

/** Starts `orchestrator agent` on a free port and resolves once it prints the URL it listens on. */
export async function startAgentProcess(launch: AgentLaunch, timeoutMs = 20_000): Promise<StartedAgent> {
  const agentArgs = ['agent', '--host', launch.host ?? '127.0.0.1', '--port', '0',
    '--instance-id', launch.instanceId, '--runtime', launch.runtime ?? 'auto'];
  if (launch.gpu) agentArgs.push('--gpu', launch.gpu);
  if (launch.workDir) agentArgs.push('--work-dir', launch.workDir);
  if (launch.orphanTimeoutSeconds !== undefined) agentArgs.push('--orphan-timeout', String(launch.orphanTimeoutSeconds));
  if (launch.exitWhenMissing) agentArgs.push('--exit-when-missing', launch.exitWhenMissing);
  const { child, announced } = await startUntilListening(agentArgs, { ...launch.env, [AGENT_TOKEN_VARIABLE]: launch.token }, launch.detached ?? false, timeoutMs);
  return { child, url: announced.url as string };
}

/**
 * Starts an `orchestrator` command that prints `{"event":"listening",...}` once it serves, and resolves with that
 * line's fields; the command's stderr is the error when it exits or takes longer than `timeoutMs` first.
 */
export function startUntilListening(args: string[], env: NodeJS.ProcessEnv, detached: boolean, timeoutMs: number): Promise<{ child: ChildProcess; announced: Record<string, unknown> }> {
  const { command, args: base } = orchestratorCommand();
  const child = spawn(command, [...base, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'], detached });
  const what = args[0];
  return new Promise((resolve, reject) => {
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => fail(new Error(`${what} did not start within ${timeoutMs} ms: ${stderr.trim()}`)), timeoutMs);
    const fail = (error: Error) => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(error);
    };
    child.stderr!.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
    child.once('exit', (code) => fail(new Error(`${what} exited with code ${code} before listening: ${stderr.trim()}`)));
    child.stdout!.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
      const line = stdout.split('\n').find((l) => l.includes('"listening"'));
      if (!line) return;
      clearTimeout(timer);
      child.removeAllListeners('exit');
      // From here the process's own log file has everything: drain the pipes without keeping their text.
      child.stdout!.removeAllListeners('data');
      child.stderr!.removeAllListeners('data');
      child.stdout!.resume();
      child.stderr!.resume();
      resolve({ child, announced: JSON.parse(line) as Record<string, unknown> });
    });
  });
}
