import type { CAC } from 'cac';

/**
 * Runs the command line. A mistake in it (an unknown command or option, a missing argument) is the
 * user's: it prints `error: <message>` and exits 1 rather than a stack trace; no command prints the help.
 */
export function parseCommandLine(cli: CAC, argv: string[] = process.argv): void {
  try {
    cli.parse(argv);
  } catch (error) {
    if ((error as Error).name !== 'CACError') throw error;
    const command = cli.matchedCommandName ? ` ${cli.matchedCommandName}` : '';
    process.stderr.write(`error: ${fileAsArgument(cli) ?? `${(error as Error).message}; see orchestrator${command} --help`}\n`);
    process.exit(1);
  }
  if (cli.options.version && !cli.matchedCommand) {
    void printVersion();
    return;
  }
  if (cli.matchedCommand || cli.options.help) return;
  if (cli.args.length > 0) {
    process.stderr.write(`error: unknown command "${cli.args[0]}"; see orchestrator --help\n`);
    process.exit(1);
  }
  cli.outputHelp();
}

/** `apply file.yml`: a command that reads files with -f was given one as a plain word. */
function fileAsArgument(cli: CAC): string | undefined {
  const command = cli.matchedCommand;
  if (!command?.hasOption('file') || cli.args.length === 0) return undefined;
  const words = cli.args.map((arg) => `-f ${arg}`).join(' ');
  return `${command.name} reads files given with -f, not as plain words: did you mean orchestrator ${command.name} ${words}?`;
}

/** The version lives with the package; its reader is loaded only when asked, like the server itself. */
async function printVersion(): Promise<void> {
  const { VERSION } = await import('../server/version.js');
  process.stdout.write(`orchestrator ${VERSION}\n`);
}
