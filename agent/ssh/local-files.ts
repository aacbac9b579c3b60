import { constants, type Stats } from 'node:fs';
import { chmod, chown, lstat, mkdir, open, readdir, readlink, realpath, rename, rmdir, stat, symlink, unlink, utimes, type FileHandle } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Attributes } from 'ssh2';
import type { DirectoryEntry, FileStore, OpenFile, OpenFlags } from './file-store.js';

function nodeFlags(flags: OpenFlags): number {
  const access = flags.read && flags.write ? constants.O_RDWR : flags.write ? constants.O_WRONLY : constants.O_RDONLY;
  return access
    | (flags.append ? constants.O_APPEND : 0) | (flags.create ? constants.O_CREAT : 0)
    | (flags.truncate ? constants.O_TRUNC : 0) | (flags.exclusive ? constants.O_EXCL : 0);
}

function attributesOf(stats: Stats): Attributes {
  return {
    mode: stats.mode, uid: stats.uid, gid: stats.gid, size: stats.size,
    atime: Math.floor(stats.atimeMs / 1000), mtime: Math.floor(stats.mtimeMs / 1000),
  };
}

async function applyAttributes(
  attrs: Partial<Attributes>,
  ops: { chmod(mode: number): Promise<void>; chown(uid: number, gid: number): Promise<void>; utimes(atime: number, mtime: number): Promise<void>; truncate(size: number): Promise<void> },
): Promise<void> {
  if (attrs.size !== undefined) await ops.truncate(attrs.size);
  if (attrs.uid !== undefined && attrs.gid !== undefined) await ops.chown(attrs.uid, attrs.gid);
  if (attrs.mode !== undefined) await ops.chmod(attrs.mode & 0o7777);
  if (attrs.atime !== undefined && attrs.mtime !== undefined) await ops.utimes(attrs.atime, attrs.mtime);
}

class LocalFile implements OpenFile {
  /**
   * SFTP clients keep many reads or writes in flight, but Node says a FileHandle must not be written again before
   * its last write settled (under load, bytes were lost): its operations run one after another.
   */
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly handle: FileHandle) {}

  private inTurn<T>(operation: () => Promise<T>): Promise<T> {
    const result = this.queue.then(operation, operation);
    this.queue = result.catch(() => {});
    return result;
  }

  read(offset: number, length: number): Promise<Buffer | null> {
    return this.inTurn(async () => {
      const buffer = Buffer.alloc(length);
      const { bytesRead } = await this.handle.read(buffer, 0, length, offset);
      return bytesRead === 0 ? null : buffer.subarray(0, bytesRead);
    });
  }

  write(offset: number, data: Buffer): Promise<void> {
    return this.inTurn(async () => {
      await this.handle.write(data, 0, data.length, offset);
    });
  }

  async stat(): Promise<Attributes> {
    return attributesOf(await this.handle.stat());
  }

  async setstat(attrs: Partial<Attributes>): Promise<void> {
    const { handle } = this;
    await applyAttributes(attrs, {
      chmod: (mode) => handle.chmod(mode), chown: (uid, gid) => handle.chown(uid, gid),
      utimes: (atime, mtime) => handle.utimes(atime, mtime), truncate: (size) => handle.truncate(size),
    });
  }

  close(): Promise<void> {
    return this.inTurn(() => this.handle.close());
  }
}

/** This machine's file system, as the agent's user: for process jobs, which run as that user too. */
export class LocalFileStore implements FileStore {
  constructor(readonly home: string) {}

  async realpath(path: string): Promise<string> {
    const absolute = this.absolute(path);
    try {
      return await realpath(absolute);
    } catch {
      // A path about to be created (the target of an upload) has no real path yet.
      return absolute;
    }
  }

  async stat(path: string): Promise<Attributes> {
    return attributesOf(await stat(this.absolute(path)));
  }

  async lstat(path: string): Promise<Attributes> {
    return attributesOf(await lstat(this.absolute(path)));
  }

  async readdir(path: string): Promise<DirectoryEntry[]> {
    const directory = this.absolute(path);
    const names = await readdir(directory);
    const entries = await Promise.all(names.map(async (name) => {
      const stats = await lstat(posix.join(directory, name)).catch(() => null);
      return stats ? { name, attrs: attributesOf(stats) } : null;
    }));
    return entries.filter((entry): entry is DirectoryEntry => entry !== null);
  }

  async open(path: string, flags: OpenFlags, attrs: Partial<Attributes>): Promise<OpenFile> {
    return new LocalFile(await open(this.absolute(path), nodeFlags(flags), (attrs.mode ?? 0o644) & 0o7777));
  }

  async mkdir(path: string, attrs: Partial<Attributes>): Promise<void> {
    await mkdir(this.absolute(path), { mode: (attrs.mode ?? 0o755) & 0o7777 });
  }

  rmdir(path: string): Promise<void> {
    return rmdir(this.absolute(path));
  }

  remove(path: string): Promise<void> {
    return unlink(this.absolute(path));
  }

  async rename(from: string, to: string): Promise<void> {
    const target = this.absolute(to);
    // SFTP's rename does not replace an existing file (posix-rename does, and ssh2 does not offer it).
    if (await lstat(target).then(() => true, () => false)) throw Object.assign(new Error(`${to} exists`), { code: 'EEXIST' });
    await rename(this.absolute(from), target);
  }

  async setstat(path: string, attrs: Partial<Attributes>): Promise<void> {
    const absolute = this.absolute(path);
    await applyAttributes(attrs, {
      chmod: (mode) => chmod(absolute, mode), chown: (uid, gid) => chown(absolute, uid, gid),
      utimes: (atime, mtime) => utimes(absolute, atime, mtime),
      truncate: async (size) => {
        const handle = await open(absolute, constants.O_WRONLY);
        try {
          await handle.truncate(size);
        } finally {
          await handle.close();
        }
      },
    });
  }

  readlink(path: string): Promise<string> {
    return readlink(this.absolute(path));
  }

  symlink(target: string, linkPath: string): Promise<void> {
    return symlink(target, this.absolute(linkPath));
  }

  private absolute(path: string): string {
    return posix.resolve(this.home, path);
  }
}
