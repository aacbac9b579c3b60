import { CliError } from './errors.js';

/**
 * Option values exactly as typed. The argument parser turns number-like values into numbers
 * ("0012" → 12, "1e3" → 1000), which would corrupt tokens, names and GPU specs, so text options are
 * read back from the command line itself.
 */
export function optionTexts(names: readonly string[], argv: readonly string[] = process.argv.slice(2)): string[] {
  const values: string[] = [];
  for (let index = 0; index < argv.length; index++) {
    const argument = argv[index]!;
    if (argument === '--') break;
    for (const name of names) {
      const flag = name.length === 1 ? `-${name}` : `--${name}`;
      if (argument === flag && index + 1 < argv.length) {
        values.push(argv[index + 1]!);
        index++;
        break;
      }
      if (argument.startsWith(`${flag}=`)) {
        values.push(argument.slice(flag.length + 1));
        break;
      }
    }
  }
  return values;
}

/** The last value given for the option, or undefined when it was not given. */
export function optionText(names: readonly string[], argv?: readonly string[]): string | undefined {
  return optionTexts(names, argv).at(-1);
}

/** `--port`: a port number, 0 for any free one. */
export function portFlag(value: unknown): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new CliError(`--port must be a port number from 0 to 65535, got ${String(value)}`);
  return port;
}
