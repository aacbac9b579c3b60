import { spawn } from '@lydell/node-pty';
import { CLI_MAIN } from './cli.js';

export interface TerminalResult {
  code: number;
  /** stdout and stderr as the terminal showed them, without control sequences, with `\r\n` line ends made `\n`. */
  screen: string;
}

/**
 * Runs the CLI on a terminal (a pty), as a person does, so that it asks its questions; each answer is typed
 * once the screen matches its prompt.
 */
export function runCliInTerminal(args: readonly string[], options: { home: string; cwd?: string }, answers: Array<[RegExp, string]>, timeoutMs = 60_000): Promise<TerminalResult> {
  const env = { PATH: process.env.PATH ?? '', HOME: options.home, LANG: 'C.UTF-8', TERM: 'xterm' };
  const term = spawn(process.execPath, [CLI_MAIN, ...args], { cols: 200, rows: 50, cwd: options.cwd, env });
  let screen = '';
  const pending = [...answers];
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      term.kill();
      reject(new Error(`orchestrator ${args.join(' ')} did not end in ${timeoutMs} ms; the screen:\n${screen}`));
    }, timeoutMs);
    term.onData((data) => {
      // eslint-disable-next-line no-control-regex
      screen += data.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, '').replace(/\r\n/g, '\n');
      const next = pending[0];
      if (next && next[0].test(screen)) {
        pending.shift();
        term.write(`${next[1]}\r`);
      }
    });
    term.onExit(({ exitCode }) => {
      clearTimeout(timer);
      resolve({ code: exitCode, screen });
    });
  });
}
