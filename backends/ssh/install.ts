import { spawn } from 'node:child_process';
import { dirname, basename } from 'node:path';
import { BackendError } from '../backend.js';
import type { AgentFiles } from './agent-bundle.js';
import type { SshConnection } from './connection.js';
import type { HostFacts } from './host-facts.js';

/** How long the agent may take to print its address after it is started. */
const LISTENING_WAIT_MS = 30_000;
const LISTENING_POLL_MS = 250;

/** A shell word: the argument exactly, in single quotes. */
export function quoted(value: string): string {
  return `'${value.replace(/'/g, `'\\''`)}'`;
}

/** The folder of one instance's agent on its host; everything installed for it is in there (and a systemd unit). */
export function instanceDir(baseDir: string, instanceId: string): string {
  return `${baseDir}/agents/${instanceId}`;
}

export function unitName(instanceId: string): string {
  return `orchestrator-agent-${instanceId}.service`;
}

/**
 * Runs the agent once, on a port of the host's loopback that it prints to agent.out; only the server's SSH tunnel
 * reaches it. Removing the instance's folder ends it, jobs and all (--exit-when-missing).
 */
function runAgentScript(instanceId: string, runtime: 'auto' | 'process'): string {
  return `#!/bin/sh
dir=$(cd "$(dirname "$0")" && pwd)
echo $$ > "$dir/agent.pid"
ORCHESTRATOR_AGENT_TOKEN=$(cat "$dir/token") || exit 1
export ORCHESTRATOR_AGENT_TOKEN
exec "$dir/node" "$dir/agent.mjs" agent --host 127.0.0.1 --port 0 --instance-id ${quoted(instanceId)} --runtime ${runtime} \\
  --work-dir "$dir/work" --orphan-timeout off --exit-when-missing "$dir" >"$dir/agent.out" 2>"$dir/agent.err"
`;
}

/** Where systemd is missing: a loop that starts the agent again whenever it ends, until the instance is uninstalled. */
const SUPERVISE_SCRIPT = `#!/bin/sh
dir=$(cd "$(dirname "$0")" && pwd)
running=$(cat "$dir/supervisor.pid" 2>/dev/null)
if [ -n "$running" ] && [ "$running" != $$ ] && kill -0 "$running" 2>/dev/null; then exit 0; fi
echo $$ > "$dir/supervisor.pid"
while [ -f "$dir/token" ]; do
  sh "$dir/run-agent.sh"
  sleep 1
done
`;

/** The systemd unit that supervises the agent of `instanceId`, installed in `dir`. */
export function unitFile(instanceId: string, dir: string): string {
  return `[Unit]
Description=orchestrator agent of instance ${instanceId}
After=network-online.target

[Service]
ExecStart=/bin/sh ${dir}/run-agent.sh
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
`;
}

function sudo(facts: Pick<HostFacts, 'privileged'>): string {
  return facts.privileged === 'root' ? '' : 'sudo -n ';
}

async function mustRun(connection: SshConnection, what: string, command: string, stdin?: string | Buffer): Promise<string> {
  const result = await connection.exec(command, stdin);
  if (result.code !== 0) throw new BackendError(`${what} failed (exit ${result.code}): ${(result.stderr || result.stdout).trim().slice(-500)}`, true);
  return result.stdout;
}

/** A tar of the terminal module's two folders, as they lie in this server's node_modules. */
function ptyArchive(pty: NonNullable<AgentFiles['pty']>): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const scope = dirname(pty.module);
    const tar = spawn('tar', ['-cf', '-', '-C', dirname(scope), `${basename(scope)}/${basename(pty.module)}`, `${basename(scope)}/${basename(pty.native)}`]);
    const chunks: Buffer[] = [];
    tar.stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    tar.on('error', reject);
    tar.on('close', (code) => (code === 0 ? resolve(Buffer.concat(chunks)) : reject(new Error(`tar exited with ${code}`))));
  });
}

/** Copies the agent and its Node to the host, without the host downloading anything, and starts it under a supervisor. */
export async function installAgent(connection: SshConnection, facts: HostFacts, files: AgentFiles, instanceId: string, token: string, fleetId: string): Promise<void> {
  const dir = instanceDir(facts.baseDir, instanceId);
  await mustRun(connection, 'making the agent\'s folder', `mkdir -p ${quoted(dir)}/node_modules && chmod 700 ${quoted(dir)}`);
  // Under another name first: a Node still running from an earlier install cannot be written over.
  await connection.upload(files.node, `${dir}/node.part`, 0o755);
  await mustRun(connection, 'placing Node', `mv -f ${quoted(`${dir}/node.part`)} ${quoted(`${dir}/node`)}`);
  await connection.upload(files.bundle, `${dir}/agent.mjs`, 0o644);
  if (files.pty) await mustRun(connection, 'copying the terminal module', `tar -xf - -C ${quoted(`${dir}/node_modules`)}`, await ptyArchive(files.pty));
  const runtime = facts.containers ? 'auto' : 'process';
  const write = (name: string, content: string, mode: string) => mustRun(connection, `writing ${name}`,
    `umask 077 && cat > ${quoted(`${dir}/${name}`)} && chmod ${mode} ${quoted(`${dir}/${name}`)}`, content);
  await write('package.json', `${JSON.stringify({ name: 'orchestrator', version: files.version, type: 'module' })}\n`, '644');
  await write('fleet', fleetId, '644');
  await write('token', token, '600');
  await write('run-agent.sh', runAgentScript(instanceId, runtime), '755');
  await write('supervise.sh', SUPERVISE_SCRIPT, '755');
  await mustRun(connection, 'checking the uploaded Node', `${quoted(`${dir}/node`)} --version`);
  await startSupervisor(connection, facts, instanceId);
}

/** Starts the agent's supervisor: systemd, which also starts it at boot, or else the loop of supervise.sh, detached from the SSH session. */
export async function startSupervisor(connection: SshConnection, facts: HostFacts, instanceId: string): Promise<void> {
  const dir = instanceDir(facts.baseDir, instanceId);
  if (facts.systemd) {
    const unit = `/etc/systemd/system/${unitName(instanceId)}`;
    await mustRun(connection, 'installing the systemd unit', `${sudo(facts)}tee ${quoted(unit)} >/dev/null`, unitFile(instanceId, dir));
    await mustRun(connection, 'starting the agent with systemd',
      `echo systemd > ${quoted(`${dir}/supervisor`)} && ${sudo(facts)}systemctl daemon-reload && ${sudo(facts)}systemctl enable --now ${unitName(instanceId)}`);
    return;
  }
  // Its own session (setsid) and no descriptor of the SSH channel, so that the channel closes and the loop outlives it.
  // Its pid is written before this returns, so that the next look sees it running (supervise.sh writes the same).
  await mustRun(connection, 'starting the agent\'s supervisor', `cd ${quoted(dir)} && echo process > supervisor && rm -f agent.out && `
    + 'if command -v setsid >/dev/null; then setsid nohup sh supervise.sh </dev/null >/dev/null 2>&1 & else nohup sh supervise.sh </dev/null >/dev/null 2>&1 & fi; '
    + 'echo $! > supervisor.pid');
}

/** The supervisor still runs (or, with systemd, the unit is active): a host that rebooted without systemd has none. */
export async function supervisorRuns(connection: SshConnection, facts: Pick<HostFacts, 'baseDir'>, instanceId: string): Promise<boolean> {
  const dir = quoted(instanceDir(facts.baseDir, instanceId));
  const { stdout } = await connection.exec(`if [ "$(cat ${dir}/supervisor 2>/dev/null)" = systemd ]; then systemctl is-active --quiet ${unitName(instanceId)} && echo yes; `
    + `else pid=$(cat ${dir}/supervisor.pid 2>/dev/null) && kill -0 "$pid" 2>/dev/null && echo yes; fi; true`);
  return stdout.trim() === 'yes';
}

/** The instances of the fleet whose agents are installed on the host. */
export async function fleetAgents(connection: SshConnection, facts: Pick<HostFacts, 'baseDir'>, fleetId: string): Promise<string[]> {
  const { stdout } = await connection.exec(`for dir in ${quoted(`${facts.baseDir}/agents`)}/*/; do `
    + `[ "$(cat "$dir/fleet" 2>/dev/null)" = ${quoted(fleetId)} ] && basename "$dir"; done; true`);
  return stdout.split('\n').filter(Boolean);
}

/** Whether anything of the instance is on the host. */
export async function isInstalled(connection: SshConnection, facts: Pick<HostFacts, 'baseDir'>, instanceId: string): Promise<boolean> {
  const { stdout } = await connection.exec(`[ -f ${quoted(`${instanceDir(facts.baseDir, instanceId)}/token`)} ] && echo yes; true`);
  return stdout.trim() === 'yes';
}

/** The agent's port on the host's loopback, once the running agent has printed it; null while it has not. */
export async function agentPort(connection: SshConnection, facts: Pick<HostFacts, 'baseDir'>, instanceId: string): Promise<number | null> {
  const { stdout } = await connection.exec(`cat ${quoted(`${instanceDir(facts.baseDir, instanceId)}/agent.out`)} 2>/dev/null; true`);
  const line = stdout.split('\n').find((l) => l.includes('"listening"'));
  if (!line) return null;
  return Number(new URL((JSON.parse(line) as { url: string }).url).port);
}

/** Waits for the agent to print its port; its error output is the reason when it does not. */
export async function waitForAgentPort(connection: SshConnection, facts: Pick<HostFacts, 'baseDir'>, instanceId: string): Promise<number> {
  const deadline = Date.now() + LISTENING_WAIT_MS;
  while (Date.now() < deadline) {
    const port = await agentPort(connection, facts, instanceId);
    if (port !== null) return port;
    await new Promise((resolve) => setTimeout(resolve, LISTENING_POLL_MS));
  }
  const { stdout } = await connection.exec(`tail -c 800 ${quoted(`${instanceDir(facts.baseDir, instanceId)}/agent.err`)} 2>/dev/null; true`);
  throw new BackendError(`the agent did not start within ${LISTENING_WAIT_MS / 1000}s: ${stdout.trim() || 'it printed nothing'}`, true);
}

/**
 * Stops the agent and removes all that was installed for the instance: its supervisor (and systemd unit), its
 * folder (the agent then kills its jobs and exits), and the base folder once no other instance uses it. With sudo,
 * as systemd's agent runs as root and its jobs' files are root's.
 */
export async function uninstallAgent(connection: SshConnection, facts: Pick<HostFacts, 'baseDir' | 'privileged'>, instanceId: string): Promise<void> {
  const dir = quoted(instanceDir(facts.baseDir, instanceId));
  const unit = unitName(instanceId);
  await mustRun(connection, 'uninstalling the agent', `
if [ -f /etc/systemd/system/${unit} ]; then
  ${sudo(facts)}systemctl disable --now ${unit} >/dev/null 2>&1
  ${sudo(facts)}rm -f /etc/systemd/system/${unit} && ${sudo(facts)}systemctl daemon-reload
fi
supervisor=$(cat ${dir}/supervisor.pid 2>/dev/null) && kill "$supervisor" 2>/dev/null
agent=$(cat ${dir}/agent.pid 2>/dev/null)
${sudo(facts)}rm -rf ${dir}
if [ -n "$agent" ]; then
  n=0; while ${sudo(facts)}kill -0 "$agent" 2>/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
  ${sudo(facts)}kill -KILL "$agent" 2>/dev/null
fi
rmdir ${quoted(`${facts.baseDir}/agents`)} 2>/dev/null && rmdir ${quoted(facts.baseDir)} 2>/dev/null
true`);
}
