import { finished } from 'node:stream/promises';
import type { ServerChannel, Session } from 'ssh2';
import type { Logger } from 'winston';
import type { FileStore } from './file-store.js';
import { acceptedClientVariable, type SessionProcess, type SessionRequest, type TerminalRequest } from './job-target.js';
import { serveSftp } from './sftp.js';

/** What a session may start in its job. */
export interface SessionOpener {
  start(request: SessionRequest): Promise<SessionProcess>;
  files(): Promise<FileStore>;
}

/** Ends the channel as sshd does: exit-status (or exit-signal), then EOF and close. */
function reportExit(channel: ServerChannel, exit: { code: number | null; signal?: string }): void {
  if (exit.signal) channel.exit(exit.signal, false, '');
  else channel.exit(exit.code ?? 255);
  channel.end();
}

/**
 * A channel closed while its command runs (the client went away) hangs the command up; processes a finished command
 * left in the background keep running, as sshd leaves them (`server & exit` keeps the server).
 */
async function run(channel: ServerChannel, process: SessionProcess): Promise<void> {
  let exited = false;
  void process.exited.then(() => { exited = true; });
  channel.once('close', () => {
    if (!exited) process.end();
  });
  channel.pipe(process.stdin);
  process.stdout.pipe(channel, { end: false });
  process.stderr?.pipe(channel.stderr, { end: false });
  const outputs = [process.stdout, ...(process.stderr ? [process.stderr] : [])].map((stream) => finished(stream).catch(() => undefined));
  const [exit] = await Promise.all([process.exited, ...outputs]);
  reportExit(channel, exit);
}

/** One SSH session channel: its pty, environment and signals, then a shell, a command or SFTP in the job. */
export function serveSession(session: Session, opener: SessionOpener, logger: Logger): void {
  const env: Record<string, string> = {};
  let terminal: TerminalRequest | undefined;
  let running: SessionProcess | undefined;

  session.on('pty', (accept, _reject, info) => {
    terminal = { term: info.term || 'xterm', cols: info.cols || 80, rows: info.rows || 24 };
    accept?.();
  });
  session.on('window-change', (accept, _reject, info) => {
    if (terminal) Object.assign(terminal, { cols: info.cols, rows: info.rows });
    running?.resize(info.cols, info.rows);
    accept?.();
  });
  session.on('env', (accept, reject, { key, val }) => {
    if (!acceptedClientVariable(key)) {
      reject?.();
      return;
    }
    env[key] = val;
    accept?.();
  });
  session.on('signal', (accept, reject, { name }) => {
    if (running?.signal(`SIG${name}` as NodeJS.Signals)) accept?.();
    else reject?.();
  });

  const start = (channel: ServerChannel | undefined, command: string | undefined) => {
    if (!channel) return;
    opener.start({ command, terminal, env })
      .then((process) => {
        running = process;
        return run(channel, process);
      })
      .catch((error: Error) => {
        logger.warn('ssh session could not start', { error: error.message });
        channel.stderr.write(`could not start a session in the job: ${error.message}\r\n`);
        reportExit(channel, { code: 255 });
      });
  };
  session.on('shell', (accept) => start(accept(), undefined));
  session.on('exec', (accept, _reject, { command }) => start(accept(), command));
  session.on('sftp', (accept) => {
    const sftp = accept();
    if (sftp) serveSftp(sftp, opener.files(), logger);
  });
}
