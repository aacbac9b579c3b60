import type Docker from 'dockerode';
import { PassThrough } from 'node:stream';

export interface CapturedExec {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `argv` in a running container (no shell, no stdin) and collects its output and exit code. */
export async function execCaptured(docker: Docker, container: Docker.Container, argv: string[]): Promise<CapturedExec> {
  const exec = await container.exec({ Cmd: argv, AttachStdout: true, AttachStderr: true });
  const stream = await exec.start({ hijack: true, stdin: false });
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  const chunks = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  stdout.on('data', (chunk: Buffer) => chunks.stdout.push(chunk));
  stderr.on('data', (chunk: Buffer) => chunks.stderr.push(chunk));
  docker.modem.demuxStream(stream, stdout, stderr);
  await new Promise<void>((resolve, reject) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', reject);
  });
  return {
    code: await execExitCode(exec),
    stdout: Buffer.concat(chunks.stdout).toString('utf8'),
    stderr: Buffer.concat(chunks.stderr).toString('utf8'),
  };
}

/** An ended exec's exit code; an engine may report it a moment after the output ended. */
export async function execExitCode(exec: Docker.Exec): Promise<number | null> {
  for (let attempt = 0; attempt < 50; attempt += 1) {
    const details = await exec.inspect();
    if (!details.Running) return details.ExitCode ?? null;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return null;
}
