import type { RunSpec } from '../api/spec.js';
import { ApiRequestError, type ApiClient } from './client.js';
import { confirm } from './prompt.js';
import { addInclude, includeDeclined, includeLine, isIncluded, rememberIncludeDeclined, userSshConfigPath } from './ssh-config.js';
import { ensureKeyRegistered } from './ssh-keys.js';

/** `--no-ssh-config`, or ORCHESTRATOR_NO_SSH_CONFIG=1: ~/.ssh/config is left alone. */
export function leavesSshConfig(flags: { sshConfig?: boolean }): boolean {
  return flags.sshConfig === false || process.env.ORCHESTRATOR_NO_SSH_CONFIG === '1';
}

/**
 * Whether one reaches the run over SSH, and so wants plain `ssh <run>` to work: it stays up (a dev environment, a
 * service) or has its ports forwarded. A plain task is followed rather than entered, and often ends within seconds.
 */
export function reachedOverSsh(spec: RunSpec): boolean {
  if (spec.schedule) return false;
  if (spec.type === 'task') return (spec.ports?.length ?? 0) > 0;
  return true;
}

/**
 * Before a run is reached: the user's key is registered, so that the run lets them in, and ~/.ssh/config includes
 * our entries once (asked on a terminal, said in one line otherwise). A server that refuses the key costs SSH, not the command.
 */
export async function prepareSsh(client: ApiClient, yes: boolean, leaveSshConfig: boolean): Promise<void> {
  try {
    await ensureKeyRegistered(client);
  } catch (error) {
    if (!(error instanceof ApiRequestError)) throw error;
    process.stderr.write(`warning: ssh into runs will not work: the server did not take your SSH key: ${error.message}\n`);
    return;
  }
  if (leaveSshConfig || isIncluded() || includeDeclined()) return;
  const where = userSshConfigPath();
  if (process.stdin.isTTY && !yes) {
    if (await confirm(`Add "${includeLine()}" at the top of ${where}, so that "ssh <run>" reaches your runs?`, false)) {
      addInclude();
    } else {
      rememberIncludeDeclined();
      process.stderr.write(`${where} left alone; orchestrator ssh-config --include adds the line later\n`);
    }
    return;
  }
  addInclude();
  process.stderr.write(`added "${includeLine()}" at the top of ${where}, so that "ssh <run>" works (--no-ssh-config leaves it alone)\n`);
}
