/** The desktop IDEs a dev environment's `ide` names, and the link that opens one on a run over SSH. */

export interface Ide {
  name: string;
  scheme: string;
}

const IDES: Record<string, Ide> = {
  vscode: { name: 'VS Code Desktop', scheme: 'vscode' },
  cursor: { name: 'Cursor', scheme: 'cursor' },
  windsurf: { name: 'Windsurf', scheme: 'windsurf' },
};

/** The IDE of a dev environment whose spec names one; undefined for any other run. */
export function ideOf(run: { kind: string; spec: Record<string, unknown> }): Ide | undefined {
  return run.kind === 'dev-environment' && typeof run.spec.ide === 'string' ? IDES[run.spec.ide] : undefined;
}

/** The link that opens `folder` (absolute; empty for none) of the run's SSH host in the IDE, through its Remote-SSH extension. */
export function ideLink(ide: Ide, host: string, folder: string): string {
  return `${ide.scheme}://vscode-remote/ssh-remote+${host}${folder}`;
}
