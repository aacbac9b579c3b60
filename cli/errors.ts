import { appendFileSync, mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';

/** A problem the user can fix: printed as `error: <message>` with exit code 1, never with a stack trace. */
export class CliError extends Error {
  constructor(message: string, readonly exitCode = 1) {
    super(message);
    this.name = 'CliError';
  }
}

/** The user pressed Ctrl-C where nothing was under way yet (a question): the command ends with 130, as on every Ctrl-C, saying nothing more. */
export class Interrupted extends Error {
  constructor() {
    super('interrupted');
    this.name = 'Interrupted';
  }
}

/** Writes everything still buffered for stdout and stderr, then ends the process with `code`. */
export async function exitWith(code: number): Promise<never> {
  await Promise.all([process.stdout, process.stderr].map((stream) => new Promise<void>((resolve) => stream.write('', () => resolve()))));
  process.exit(code);
}

const MESSAGE_SHOWN = 300;

/** Where the full trace of an unexpected error is kept. */
export function errorLogPath(): string {
  return join(process.env.HOME || homedir(), '.orchestrator', 'errors.log');
}

/**
 * An unexpected error (a fault of the program or of a library) as one line that says where its full trace was
 * appended: printed whole, it could be a library's minified source, as Node shows the line that threw. The log
 * names only the command, as its arguments may hold a token. `failed` says what could not be done, in place of the
 * error's class.
 */
export function unexpectedErrorLine(error: unknown, failed?: string): string {
  const message = error instanceof Error ? (failed ? error.message : `${error.name}: ${error.message}`) : String(error);
  const summary = `${failed ? `${failed}: ` : ''}${message.split('\n')[0]!.slice(0, MESSAGE_SHOWN)}`;
  const path = errorLogPath();
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const trace = error instanceof Error ? error.stack ?? summary : String(error);
    appendFileSync(path, `${new Date().toISOString()} orchestrator ${process.argv[2] ?? ''} (pid ${process.pid})\n${trace}\n\n`, { mode: 0o600 });
    return `error: ${summary} (an unexpected error; its full trace is in ${path})`;
  } catch {
    return `error: ${summary} (an unexpected error; its trace could not be written to ${path})`;
  }
}

/**
 * Every error that nothing caught ends the process with its one line, never with Node's print of the code that threw.
 * A reader that stopped reading (`orchestrator logs RUN | head`) is no error: the command ends quietly.
 */
export function reportUncaughtErrors(): void {
  const report = (error: unknown) => {
    if ((error as NodeJS.ErrnoException)?.code === 'EPIPE') process.exit(0);
    process.stderr.write(`${unexpectedErrorLine(error)}\n`);
    void exitWith(1);
  };
  process.on('uncaughtException', report);
  process.on('unhandledRejection', report);
}

/**
 * Wraps a command's action: a CliError or a failed request becomes `error: <message>`; anything else is
 * a fault of the program: one line, its trace in the error log. The process ends when the action does, so that kept-alive
 * connections do not hold it open.
 */
export function action<Args extends unknown[]>(run: (...args: Args) => Promise<number | void>): (...args: Args) => Promise<void> {
  return async (...args: Args) => {
    let code: number;
    try {
      code = (await run(...args)) ?? 0;
    } catch (error) {
      if (error instanceof Interrupted) {
        code = 130;
      } else if (error instanceof CliError) {
        process.stderr.write(`error: ${error.message}\n`);
        code = error.exitCode;
      } else {
        process.stderr.write(`${unexpectedErrorLine(error)}\n`);
        code = 1;
      }
    }
    await exitWith(code);
  };
}
