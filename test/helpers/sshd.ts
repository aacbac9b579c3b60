import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './ports.js';

export const SSHD = '/usr/sbin/sshd';

/** A key pair made with ssh-keygen: the private key's file and the public key's line. */
export interface KeyPair {
  privateKey: string;
  publicKey: string;
}

export function makeKeyPair(dir: string, name: string): KeyPair {
  const privateKey = join(dir, name);
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', name, '-f', privateKey]);
  return { privateKey, publicKey: readFileSync(`${privateKey}.pub`, 'utf8').trim() };
}

export interface SshdOptions {
  /** 127.0.0.2, 127.0.0.3, …: each host its own loopback address. */
  address: string;
  /** Public keys it lets in (as root, the test's user). */
  authorized: readonly string[];
  /** Folders put first on PATH of its sessions (a fake nvidia-smi). */
  path?: readonly string[];
  /** DEBUG1 logs each forwarded connection (a head node's). */
  logLevel?: 'INFO' | 'DEBUG1';
}

/**
 * A real OpenSSH server, one "host" of a test fleet: its own address, port, host key and folder, which its sessions
 * see as ORCHESTRATOR_HOST_DIR, so that what is installed on it is apart from other hosts on this machine.
 */
export class TestSshd {
  readonly dir: string;
  readonly hostDir: string;
  port = 0;
  /** What sshd wrote to its stderr (its log, with -e). */
  log = '';
  private child: ChildProcess | null = null;

  constructor(readonly options: SshdOptions) {
    this.dir = mkdtempSync(join(tmpdir(), `orch-sshd-${options.address}-`));
    this.hostDir = join(this.dir, 'host');
  }

  get address(): string {
    return this.options.address;
  }

  /** Makes a new host key (as a reinstalled machine has) and starts; `keepKey` starts again with the same one. */
  async start(keepKey = false): Promise<void> {
    if (!keepKey || !existsSync(join(this.dir, 'host_key'))) {
      rmSync(join(this.dir, 'host_key'), { force: true });
      rmSync(join(this.dir, 'host_key.pub'), { force: true });
      execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(this.dir, 'host_key')]);
    }
    mkdirSync('/run/sshd', { recursive: true });
    if (this.port === 0) this.port = await freePort();
    writeFileSync(join(this.dir, 'authorized_keys'), `${this.options.authorized.join('\n')}\n`, { mode: 0o600 });
    const path = [...this.options.path ?? [], '/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'].join(':');
    writeFileSync(join(this.dir, 'sshd_config'), [
      `ListenAddress ${this.options.address}:${this.port}`,
      `HostKey ${join(this.dir, 'host_key')}`,
      `PidFile ${join(this.dir, 'sshd.pid')}`,
      `AuthorizedKeysFile ${join(this.dir, 'authorized_keys')}`,
      'PermitRootLogin prohibit-password',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'UsePAM no',
      'StrictModes no',
      'AllowTcpForwarding yes',
      'Subsystem sftp internal-sftp',
      `SetEnv PATH=${path} ORCHESTRATOR_HOST_DIR=${this.hostDir}`,
      `LogLevel ${this.options.logLevel ?? 'INFO'}`,
      '',
    ].join('\n'));
    this.child = spawn(SSHD, ['-D', '-e', '-f', join(this.dir, 'sshd_config')], { stdio: ['ignore', 'ignore', 'pipe'] });
    this.child.stderr!.on('data', (chunk: Buffer) => { this.log += chunk.toString(); });
    const deadline = Date.now() + 10_000;
    while (!(await accepts(this.options.address, this.port))) {
      if (this.child.exitCode !== null || Date.now() > deadline) throw new Error(`sshd on ${this.options.address}:${this.port} did not start: ${this.log}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }

  async stop(): Promise<void> {
    const child = this.child;
    this.child = null;
    if (!child || child.exitCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }

  async remove(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function accepts(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host, port });
    socket.once('connect', () => { socket.destroy(); resolve(true); });
    socket.once('error', () => resolve(false));
  });
}
