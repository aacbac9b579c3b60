import type { CAC, Command } from 'cac';

/** Commands that orchestrator starts itself (on an instance, for a gateway, as ssh's ProxyCommand): listed apart from the user's. */
const INTERNAL_COMMANDS: readonly string[] = ['agent', 'gateway-server', 'ssh-proxy'];

interface HelpSection {
  title?: string;
  body: string;
}

function commandLines(commands: readonly Command[]): string {
  const width = Math.max(...commands.map((command) => command.rawName.length));
  return commands.map((command) => `  ${command.rawName.padEnd(width)}  ${command.description}`).join('\n');
}

/**
 * The help as a user reads it: a command's help starts with what the command does; the overview lists the internal
 * commands under their own heading; a negated flag (`--no-ssh-config`) does not claim `(default: true)`, which reads as
 * if leaving things alone were the default.
 */
export function helpSections(cli: CAC): (sections: HelpSection[]) => HelpSection[] {
  return (sections) => {
    const command = cli.matchedCommand;
    const shown = sections.flatMap((section): HelpSection[] => {
      if (section.title === 'Commands') {
        const internal = cli.commands.filter((c) => INTERNAL_COMMANDS.includes(c.name));
        return [
          { title: 'Commands', body: commandLines(cli.commands.filter((c) => !internal.includes(c))) },
          { title: 'Started by orchestrator itself, not typed by hand', body: commandLines(internal) },
        ];
      }
      if (section.title?.startsWith('For more info')) return [{ body: `Each command's options: ${cli.name} <command> --help` }];
      if (section.title === 'Options') return [{ ...section, body: section.body.replace(/^(\s+--no-.*?) \(default: true\)$/gm, '$1') }];
      return [section];
    });
    if (command) shown[0] = { body: `${cli.name} ${command.name}: ${command.description}` };
    return shown.map((section) => ({ ...section, body: section.body.split('\n').map((line) => line.trimEnd()).join('\n') }));
  };
}
