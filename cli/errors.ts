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

/**
 * Wraps a command's action: a CliError or a failed request becomes `error: <message>`; anything else is
 * a fault of the program and keeps its stack. The process ends when the action does, so that kept-alive
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
        process.stderr.write(`error: ${(error as Error)?.stack ?? String(error)}\n`);
        code = 1;
      }
    }
    await exitWith(code);
  };
}
