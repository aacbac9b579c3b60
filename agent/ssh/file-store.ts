import type { Attributes } from 'ssh2';

/** What an SFTP open asks for (its pflags). */
export interface OpenFlags {
  read: boolean;
  write: boolean;
  append: boolean;
  create: boolean;
  truncate: boolean;
  exclusive: boolean;
}

/** An open file of the SFTP subsystem. `read` returns null at the end of the file. */
export interface OpenFile {
  read(offset: number, length: number): Promise<Buffer | null>;
  write(offset: number, data: Buffer): Promise<void>;
  stat(): Promise<Attributes>;
  setstat(attrs: Partial<Attributes>): Promise<void>;
  close(): Promise<void>;
}

export interface DirectoryEntry {
  name: string;
  attrs: Attributes;
}

/**
 * A file system as the SFTP subsystem sees it: absolute paths (relative ones are resolved against
 * `home` first). Failures are errors with a Node `code` (ENOENT, EACCES...) where there is one.
 */
export interface FileStore {
  /** Where relative paths start: what `realpath .` answers. */
  readonly home: string;
  realpath(path: string): Promise<string>;
  stat(path: string): Promise<Attributes>;
  lstat(path: string): Promise<Attributes>;
  readdir(path: string): Promise<DirectoryEntry[]>;
  open(path: string, flags: OpenFlags, attrs: Partial<Attributes>): Promise<OpenFile>;
  mkdir(path: string, attrs: Partial<Attributes>): Promise<void>;
  rmdir(path: string): Promise<void>;
  remove(path: string): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  setstat(path: string, attrs: Partial<Attributes>): Promise<void>;
  readlink(path: string): Promise<string>;
  symlink(target: string, linkPath: string): Promise<void>;
}

export function fileError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}
