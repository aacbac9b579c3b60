import { mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The service ports that process jobs listen on, claimed machine-wide. Several agents share one
 * machine (the local backend runs one per instance), and a port is only seen taken once the job's
 * server has bound it: two agents starting replicas at the same moment would both find it free, and
 * one replica would exit on EADDRINUSE. A claim lasts from the choice until its job is removed; a
 * claim whose agent has died is stale and may be taken.
 */
export class HostPortClaims {
  constructor(private readonly dir = join(tmpdir(), `orchestrator-service-ports-${process.getuid?.() ?? 'user'}`)) {}

  /** Whether this agent now holds `port` for `jobId`; false while another live agent, or another job here, holds it. */
  async claim(port: number, jobId: string): Promise<boolean> {
    await mkdir(this.dir, { recursive: true, mode: 0o700 });
    const file = this.fileOf(port);
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        await writeFile(file, claimText(jobId), { flag: 'wx' });
        return true;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const holder = await readFile(file, 'utf8').catch(() => null);
      if (holder === null) continue;
      if (holderAlive(holder)) return false;
      await unlink(file).catch(() => undefined);
    }
    return false;
  }

  async release(port: number, jobId: string): Promise<void> {
    const file = this.fileOf(port);
    if (await readFile(file, 'utf8').catch(() => null) === claimText(jobId)) await unlink(file).catch(() => undefined);
  }

  private fileOf(port: number): string {
    return join(this.dir, String(port));
  }
}

const claimText = (jobId: string) => `${process.pid} ${jobId}\n`;

function holderAlive(text: string): boolean {
  const pid = Number(text.split(' ')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
