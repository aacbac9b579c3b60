import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import type { Duplex } from 'node:stream';
import ssh2, { type ClientChannel, type ConnectConfig } from 'ssh2';
import { sshAddress, type SshEndpoint, type SshHost } from '../../api/ssh-fleet.js';
import { BackendError } from '../backend.js';

const { Client } = ssh2;
const READY_TIMEOUT_MS = 15_000;
const KEEPALIVE_MS = 15_000;

/** The host keys an SSH fleet has seen: a host's first key is recorded, every later one must be that one. */
export interface HostKeyBook {
  /** The key recorded for `address` (`host:port`), in OpenSSH's `type base64` form; null before first contact. */
  known(address: string): Promise<string | null>;
  /** Records the key of a first contact and returns the one recorded (another server may have been first). */
  record(address: string, publicKey: string): Promise<string>;
}

/** The host showed another key than the one recorded at first contact: it is not trusted until someone decides. */
export class HostKeyChangedError extends BackendError {
  constructor(address: string, recorded: string, shown: string) {
    super(`the host key of ${address} changed: recorded ${fingerprint(recorded)} at first contact, now ${fingerprint(shown)}; `
      + 'if the host was reinstalled, remove it from ssh_config and apply, then add it back and apply, to trust its new key', false);
    this.name = 'HostKeyChangedError';
  }
}

/** `SHA256:…` of a key in OpenSSH's `type base64` form, as ssh-keygen -l prints it. */
export function fingerprint(publicKey: string): string {
  const blob = Buffer.from(publicKey.split(' ')[1] ?? '', 'base64');
  return `SHA256:${createHash('sha256').update(blob).digest('base64').replace(/=+$/, '')}`;
}

/** The wire form of a host key (as ssh2 hands it over) in OpenSSH's `type base64` form. */
function openSshForm(blob: Buffer): string {
  const typeLength = blob.readUInt32BE(0);
  return `${blob.subarray(4, 4 + typeLength).toString()} ${blob.toString('base64')}`;
}

async function privateKey(identityFile: string): Promise<Buffer> {
  const path = identityFile.replace(/^~(?=$|\/)/, homedir());
  try {
    return await readFile(path);
  } catch (error) {
    throw new BackendError(`cannot read identity_file ${identityFile} on the server: ${(error as Error).message}`, false);
  }
}

export interface CommandResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * One SSH session to a host (through its head node where it has one), with ssh2: the host key is checked
 * in-process against the fleet's record before any credential is sent, and the agent's tunnel is a channel
 * of this same connection.
 */
export class SshConnection {
  private constructor(private readonly client: InstanceType<typeof Client>, private readonly jump: InstanceType<typeof Client> | null) {}

  static async open(host: SshHost, keys: HostKeyBook): Promise<SshConnection> {
    let jump: InstanceType<typeof Client> | null = null;
    let sock: Duplex | undefined;
    if (host.proxyJump) {
      jump = await connect(host.proxyJump, keys, undefined, 'head node ');
      const via = jump;
      sock = await new Promise<Duplex>((resolve, reject) => via.forwardOut('127.0.0.1', 0, host.hostname, host.port, (error, stream) => {
        if (error) reject(new BackendError(`the head node ${sshAddress(host.proxyJump!)} could not reach ${sshAddress(host)}: ${error.message}`, true));
        else resolve(stream);
      }));
    }
    try {
      return new SshConnection(await connect(host, keys, sock), jump);
    } catch (error) {
      jump?.end();
      throw error;
    }
  }

  /** Runs a command line in the login user's shell; `stdin` is written to it and closed. */
  exec(command: string, stdin?: string | Buffer): Promise<CommandResult> {
    return new Promise((resolve, reject) => {
      this.client.exec(command, (error, channel) => {
        if (error) return reject(new BackendError(`ssh: ${error.message}`, true));
        let stdout = '';
        let stderr = '';
        channel.on('data', (chunk: Buffer) => { stdout += chunk.toString(); });
        channel.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString(); });
        channel.on('close', (code: number | null) => resolve({ code: code ?? -1, stdout, stderr }));
        channel.end(stdin);
      });
    });
  }

  /** Copies a file of this machine to `remotePath` on the host (its folder must exist). */
  upload(localPath: string, remotePath: string, mode: number): Promise<void> {
    return new Promise((resolve, reject) => {
      this.client.sftp((error, sftp) => {
        if (error) return reject(new BackendError(`sftp: ${error.message}`, true));
        sftp.fastPut(localPath, remotePath, { mode }, (putError) => {
          sftp.end();
          if (putError) reject(new BackendError(`could not copy ${localPath} to ${remotePath}: ${putError.message}`, true));
          else resolve();
        });
      });
    });
  }

  /** A TCP connection from the host to `port` on its own loopback. */
  forwardToLoopback(port: number): Promise<ClientChannel> {
    return new Promise((resolve, reject) => this.client.forwardOut('127.0.0.1', 0, '127.0.0.1', port, (error, channel) => {
      if (error) reject(error);
      else resolve(channel);
    }));
  }

  onClose(listener: () => void): void {
    this.client.once('close', listener);
  }

  close(): void {
    this.client.end();
    this.jump?.end();
  }
}

/** Connects and logs in; the host key is checked first, so that no key is offered to an impostor. */
async function connect(endpoint: SshEndpoint, keys: HostKeyBook, sock: Duplex | undefined, role = ''): Promise<InstanceType<typeof Client>> {
  const key = await privateKey(endpoint.identityFile);
  const where = sshAddress(endpoint);
  const recorded = await keys.known(where);
  let shown: string | null = null;
  const client = new Client();
  const config: ConnectConfig = {
    host: endpoint.hostname, port: endpoint.port, username: endpoint.user, privateKey: key, sock,
    readyTimeout: READY_TIMEOUT_MS, keepaliveInterval: KEEPALIVE_MS,
    hostVerifier: (blob: Buffer) => {
      shown = openSshForm(blob);
      return recorded === null || recorded === shown;
    },
  };
  await new Promise<void>((resolve, reject) => {
    client.once('ready', () => resolve());
    client.once('error', (error: Error & { level?: string }) => {
      client.end();
      if (recorded !== null && shown !== null && shown !== recorded) reject(new HostKeyChangedError(`${role}${where}`, recorded, shown));
      else if (error.level === 'client-authentication') {
        reject(new BackendError(`${role}${endpoint.user}@${where} refused the key ${endpoint.identityFile} (${error.message})`, false));
      } else if (/unsupported key format|cannot parse privateKey|encrypted/i.test(error.message)) {
        reject(new BackendError(`identity_file ${endpoint.identityFile} is not a private key ssh2 can use (${error.message})`, false));
      } else reject(new BackendError(`cannot connect to ${role}${where} over SSH: ${error.message}`, true));
    });
    client.connect(config);
  });
  if (recorded === null && shown !== null) {
    const kept = await keys.record(where, shown);
    if (kept !== shown) {
      client.end();
      throw new HostKeyChangedError(`${role}${where}`, kept, shown);
    }
  }
  return client;
}
