import type Docker from 'dockerode';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat as statLocal } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, posix } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Readable } from 'node:stream';
import type { Attributes } from 'ssh2';
import tar from 'tar-stream';
import { execCaptured } from './container-exec.js';
import { fileError, type DirectoryEntry, type FileStore, type OpenFile, type OpenFlags } from './file-store.js';
import { LocalFileStore } from './local-files.js';

/** What the engine's archive stat says (`X-Docker-Container-Path-Stat`); `mode` is a Go os.FileMode. */
interface EngineStat {
  size: number;
  mode: number;
  mtime: string;
  linkTarget?: string;
}

const GO_MODE = { dir: 2 ** 31, symlink: 2 ** 27, device: 2 ** 26, pipe: 2 ** 25, socket: 2 ** 24, setuid: 2 ** 23, setgid: 2 ** 22, charDevice: 2 ** 21, sticky: 2 ** 20 };

/** A Go os.FileMode as POSIX st_mode. */
function posixMode(goMode: number): number {
  const has = (bit: number) => Math.floor(goMode / bit) % 2 === 1;
  let type = 0o100000;
  if (has(GO_MODE.dir)) type = 0o040000;
  else if (has(GO_MODE.symlink)) type = 0o120000;
  else if (has(GO_MODE.pipe)) type = 0o010000;
  else if (has(GO_MODE.socket)) type = 0o140000;
  else if (has(GO_MODE.device)) type = has(GO_MODE.charDevice) ? 0o020000 : 0o060000;
  const special = (has(GO_MODE.setuid) ? 0o4000 : 0) | (has(GO_MODE.setgid) ? 0o2000 : 0) | (has(GO_MODE.sticky) ? 0o1000 : 0);
  return type | special | (goMode % 0o1000);
}

const TAR_TYPES: Record<string, number> = { directory: 0o040000, symlink: 0o120000, 'character-device': 0o020000, 'block-device': 0o060000, fifo: 0o010000 };

function statusCode(error: unknown): number | undefined {
  return (error as { statusCode?: number }).statusCode;
}

/** "uid[:gid]" of a numeric `User`; names and an empty user give root, as the engine extracts archives. */
function owner(user: string | undefined): { uid: number; gid: number } {
  const match = /^(\d+)(?::(\d+))?$/.exec(user ?? '');
  return match ? { uid: Number(match[1]), gid: Number(match[2] ?? match[1]) } : { uid: 0, gid: 0 };
}

/**
 * A container's file system through the engine's archive API: the engine resolves every path inside
 * the container (a symbolic link to /etc is the container's /etc), which holds for rootless engines
 * and remote ones alike. Files are read and written whole (through a temporary copy on this machine,
 * sent back on close); removals, renames, links and modes run as commands in the container.
 */
export class ContainerFileStore implements FileStore {
  private readonly owner: { uid: number; gid: number };

  constructor(
    private readonly docker: Docker,
    private readonly container: Docker.Container,
    readonly home: string,
    user: string | undefined,
  ) {
    this.owner = owner(user);
  }

  async realpath(path: string): Promise<string> {
    const absolute = this.absolute(path);
    const found = await this.engineStat(absolute).catch(() => undefined);
    return found?.linkTarget || absolute;
  }

  async stat(path: string): Promise<Attributes> {
    const absolute = this.absolute(path);
    const found = await this.engineStat(absolute);
    const attrs = this.attributes(found);
    if ((attrs.mode & 0o170000) !== 0o120000 || !found.linkTarget) return attrs;
    return this.attributes(await this.engineStat(found.linkTarget));
  }

  async lstat(path: string): Promise<Attributes> {
    return this.attributes(await this.engineStat(this.absolute(path)));
  }

  async readdir(path: string): Promise<DirectoryEntry[]> {
    const entries: DirectoryEntry[] = [];
    let root: string | undefined;
    await this.eachEntry(this.absolute(path), async (header, content) => {
      const name = header.name.replace(/\/+$/, '');
      const base = (root ??= name);
      const relative = name === base ? '' : name.slice(base.length + 1);
      if (relative.length > 0 && !relative.includes('/')) {
        entries.push({
          name: relative,
          attrs: {
            mode: (TAR_TYPES[header.type ?? 'file'] ?? 0o100000) | ((header.mode ?? 0o644) & 0o7777),
            uid: header.uid ?? 0, gid: header.gid ?? 0, size: header.size ?? 0,
            atime: Math.floor((header.mtime?.getTime() ?? 0) / 1000), mtime: Math.floor((header.mtime?.getTime() ?? 0) / 1000),
          },
        });
      }
      content.resume();
    });
    return entries;
  }

  async open(path: string, flags: OpenFlags, attrs: Partial<Attributes>): Promise<OpenFile> {
    const absolute = this.absolute(path);
    const existing = await this.engineStat(absolute).then((found) => this.attributes(found), (error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    if (!existing && !flags.create) throw fileError('ENOENT', `${path}: No such file`);
    if (existing && flags.create && flags.exclusive) throw fileError('EEXIST', `${path} exists`);
    if (existing && (existing.mode & 0o170000) === 0o040000) throw fileError('EISDIR', `${path} is a directory`);

    const scratch = await mkdtemp(join(tmpdir(), 'orchestrator-sftp-'));
    const copy = new LocalFileStore(scratch);
    if (existing && !flags.truncate) await this.fetch(absolute, join(scratch, 'file'));
    const file = await copy.open('file', { ...flags, create: true, exclusive: false }, { mode: 0o600 });
    const writes = flags.write;
    let mode = attrs.mode ?? existing?.mode ?? 0o644;
    return {
      read: (offset, length) => file.read(offset, length),
      write: (offset, data) => file.write(offset, data),
      stat: async () => ({ ...(await file.stat()), mode: (mode & 0o7777) | 0o100000, uid: existing?.uid ?? this.owner.uid, gid: existing?.gid ?? this.owner.gid }),
      setstat: async (changed) => {
        if (changed.mode !== undefined) mode = changed.mode;
        if (changed.size !== undefined) await file.setstat({ size: changed.size });
      },
      close: async () => {
        try {
          await file.close();
          if (writes) await this.send(absolute, join(scratch, 'file'), mode);
        } finally {
          await rm(scratch, { recursive: true, force: true });
        }
      },
    };
  }

  async mkdir(path: string, attrs: Partial<Attributes>): Promise<void> {
    const absolute = this.absolute(path);
    if (await this.engineStat(absolute).then(() => true, () => false)) throw fileError('EEXIST', `${path} exists`);
    const pack = tar.pack();
    pack.entry({ name: posix.basename(absolute), type: 'directory', mode: (attrs.mode ?? 0o755) & 0o7777, ...this.owner });
    pack.finalize();
    await this.put(posix.dirname(absolute), Readable.from(pack));
  }

  async rmdir(path: string): Promise<void> {
    await this.run(['rmdir', '--', this.absolute(path)]);
  }

  async remove(path: string): Promise<void> {
    await this.run(['rm', '--', this.absolute(path)]);
  }

  async rename(from: string, to: string): Promise<void> {
    const target = this.absolute(to);
    if (await this.engineStat(target).then(() => true, () => false)) throw fileError('EEXIST', `${to} exists`);
    await this.run(['mv', '--', this.absolute(from), target]);
  }

  async setstat(path: string, attrs: Partial<Attributes>): Promise<void> {
    const absolute = this.absolute(path);
    if (attrs.size !== undefined) await this.run(['truncate', '-s', String(attrs.size), absolute]);
    if (attrs.uid !== undefined && attrs.gid !== undefined) await this.run(['chown', `${attrs.uid}:${attrs.gid}`, absolute]);
    if (attrs.mode !== undefined) await this.run(['chmod', (attrs.mode & 0o7777).toString(8), absolute]);
  }

  async readlink(path: string): Promise<string> {
    return (await this.run(['readlink', this.absolute(path)])).replace(/\n$/, '');
  }

  async symlink(target: string, linkPath: string): Promise<void> {
    await this.run(['ln', '-s', target, this.absolute(linkPath)]);
  }

  private absolute(path: string): string {
    return posix.resolve(this.home, path);
  }

  private attributes(found: EngineStat): Attributes {
    const mtime = Math.floor(new Date(found.mtime).getTime() / 1000) || 0;
    return { mode: posixMode(found.mode), uid: 0, gid: 0, size: found.size, atime: mtime, mtime };
  }

  private async engineStat(path: string): Promise<EngineStat> {
    let answer: Readable & { headers: Record<string, string | undefined> };
    try {
      answer = await this.container.infoArchive({ path }) as typeof answer;
    } catch (error) {
      if (statusCode(error) === 404) throw fileError('ENOENT', `${path}: No such file`);
      throw error;
    }
    answer.resume();
    const header = answer.headers['x-docker-container-path-stat'];
    if (!header) throw new Error('the container engine did not describe the path');
    return JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as EngineStat;
  }

  private async eachEntry(path: string, visit: (header: tar.Header, content: Readable) => Promise<void>): Promise<void> {
    let archive: Readable;
    try {
      archive = await this.container.getArchive({ path }) as Readable;
    } catch (error) {
      if (statusCode(error) === 404) throw fileError('ENOENT', `${path}: No such file`);
      throw error;
    }
    const extract = tar.extract();
    archive.on('error', (error) => extract.destroy(error));
    archive.pipe(extract as unknown as NodeJS.WritableStream);
    for await (const entry of extract) await visit(entry.header, Readable.from(entry));
  }

  /** Copies one file of the container to `destination` on this machine. */
  private async fetch(path: string, destination: string): Promise<void> {
    let copied = false;
    await this.eachEntry(path, async (header, content) => {
      if (copied || header.type !== 'file') {
        content.resume();
        return;
      }
      copied = true;
      await pipeline(content, createWriteStream(destination, { mode: 0o600 }));
    });
    if (!copied) throw fileError('EISDIR', `${path} is not a regular file`);
  }

  /** Writes the file at `source` on this machine to `path` in the container, replacing it whole. */
  private async send(path: string, source: string, mode: number): Promise<void> {
    const { size } = await statLocal(source);
    const pack = tar.pack();
    const written = new Promise<void>((resolve, reject) => {
      const entry = pack.entry({ name: posix.basename(path), size, mode: mode & 0o7777, ...this.owner }, (error) => (error ? reject(error) : resolve()));
      createReadStream(source).on('error', reject).pipe(entry as unknown as NodeJS.WritableStream);
    });
    written.then(() => pack.finalize(), (error: Error) => pack.destroy(error));
    await Promise.all([this.put(posix.dirname(path), Readable.from(pack)), written]);
  }

  private async put(directory: string, archive: Readable): Promise<void> {
    try {
      await this.container.putArchive(archive, { path: directory });
    } catch (error) {
      if (statusCode(error) === 404) throw fileError('ENOENT', `${directory}: No such directory`);
      throw error;
    }
  }

  private async run(argv: string[]): Promise<string> {
    const result = await execCaptured(this.docker, this.container, argv);
    if (result.code === 0) return result.stdout;
    const message = result.stderr.trim() || `${argv[0]} failed with exit code ${result.code}`;
    throw fileError(/no such file/i.test(message) ? 'ENOENT' : /permission denied|not permitted/i.test(message) ? 'EACCES' : 'EIO', message);
  }
}
