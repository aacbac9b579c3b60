import { createInterface } from 'node:readline/promises';
import { CliError, Interrupted } from './errors.js';

/** Refuses early when a question would have to be asked with no terminal to answer it. */
export function ensureCanConfirm(yes: boolean, what: string): void {
  if (!yes && !process.stdin.isTTY) {
    throw new CliError(`cannot ask for confirmation to ${what}: stdin is not a terminal; pass -y to go ahead without asking`);
  }
}

/** Asks a yes/no question on the terminal; anything but y or yes is no. Ctrl-C ends the command (Interrupted). */
export async function confirm(question: string, yes: boolean): Promise<boolean> {
  if (yes) return true;
  const readline = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await readline.question(`${question} [y/N] `).catch((error: unknown) => {
      if ((error as Error)?.name !== 'AbortError') throw error;
      process.stderr.write('\n');
      throw new Interrupted();
    });
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    readline.close();
  }
}
