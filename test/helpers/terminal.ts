import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { CLI_MAIN } from './cli.js';
import { eventually } from './server.js';

const run = promisify(execFile);

/** The CLI on a real terminal (a tmux pane): for what only a terminal shows, such as questions and Ctrl-C at them. */
export class Terminal {
  private readonly socket = `orch-terminal-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;

  private tmux(...args: string[]) {
    return run('tmux', ['-L', this.socket, ...args]);
  }

  /** Runs `orchestrator <args>` in a new pane of 160 columns; the pane says `exited N` when it ends. */
  async start(args: readonly string[], home: string, cwd: string): Promise<void> {
    const quoted = args.map((arg) => `'${arg.replace(/'/g, `'\\''`)}'`).join(' ');
    const command = `env -i PATH="${process.env.PATH}" HOME="${home}" LANG=C.UTF-8 "${process.execPath}" "${CLI_MAIN}" ${quoted}; echo "exited $?"; sleep 600`;
    await this.tmux('new-session', '-d', '-x', '160', '-y', '50', '-c', cwd, '-s', 'cli', command);
  }

  async screen(): Promise<string> {
    return (await this.tmux('capture-pane', '-p', '-J', '-t', 'cli', '-S', '-')).stdout;
  }

  /** Waits until the screen shows `pattern`; returns the screen. */
  async waitFor(pattern: RegExp, timeoutMs = 30_000): Promise<string> {
    return eventually(async () => {
      const screen = await this.screen();
      return pattern.test(screen) ? screen : null;
    }, timeoutMs, `${pattern} on the terminal`);
  }

  /** Keys as tmux names them, e.g. C-c for Ctrl-C. */
  async press(...keys: string[]): Promise<void> {
    await this.tmux('send-keys', '-t', 'cli', ...keys);
  }

  async close(): Promise<void> {
    await this.tmux('kill-server').catch(() => undefined);
  }
}
