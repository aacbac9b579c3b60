import ssh2, { type Attributes, type SFTPWrapper } from 'ssh2';
import type { Logger } from 'winston';
import type { FileStore, OpenFile, OpenFlags } from './file-store.js';

const { STATUS_CODE, OPEN_MODE } = ssh2.utils.sftp;

function openFlags(pflags: number): OpenFlags {
  return {
    read: (pflags & OPEN_MODE.READ) !== 0,
    write: (pflags & OPEN_MODE.WRITE) !== 0,
    append: (pflags & OPEN_MODE.APPEND) !== 0,
    create: (pflags & OPEN_MODE.CREAT) !== 0,
    truncate: (pflags & OPEN_MODE.TRUNC) !== 0,
    exclusive: (pflags & OPEN_MODE.EXCL) !== 0,
  };
}

type Handle = { kind: 'file'; file: OpenFile } | { kind: 'directory'; path: string; listed: boolean };

const TYPE_LETTERS: Record<number, string> = { 0o040000: 'd', 0o120000: 'l', 0o020000: 'c', 0o060000: 'b', 0o010000: 'p', 0o140000: 's' };

/** `ls -l`'s line for an entry: what OpenSSH's sftp shows for `ls -l`. */
function longName(name: string, attrs: Attributes): string {
  const type = TYPE_LETTERS[attrs.mode & 0o170000] ?? '-';
  const permissions = [6, 3, 0].map((shift) => {
    const bits = (attrs.mode >> shift) & 7;
    return `${bits & 4 ? 'r' : '-'}${bits & 2 ? 'w' : '-'}${bits & 1 ? 'x' : '-'}`;
  }).join('');
  const date = new Date(attrs.mtime * 1000).toISOString().slice(0, 16).replace('T', ' ');
  return `${type}${permissions} 1 ${attrs.uid} ${attrs.gid} ${String(attrs.size).padStart(8)} ${date} ${name}`;
}

function statusOf(error: unknown): { code: number; message: string } {
  const { code, message } = error as NodeJS.ErrnoException;
  if (code === 'ENOENT') return { code: STATUS_CODE.NO_SUCH_FILE, message: 'No such file' };
  if (code === 'EACCES' || code === 'EPERM') return { code: STATUS_CODE.PERMISSION_DENIED, message: 'Permission denied' };
  if (code === 'ENOTSUP') return { code: STATUS_CODE.OP_UNSUPPORTED, message };
  return { code: STATUS_CODE.FAILURE, message: message ?? String(error) };
}

/**
 * The client's EOF ends the subsystem. sshd then reports sftp-server's exit status 0 and closes the
 * channel; scp counts a missing status as a failure, and ssh2's SFTP server has no call for it.
 */
function endSubsystem(sftp: SFTPWrapper): void {
  const internals = sftp as unknown as { _protocol?: { exitStatus(channel: number, status: number): void }; outgoing?: { id: number; state: string } };
  if (internals._protocol && internals.outgoing?.state === 'open') internals._protocol.exitStatus(internals.outgoing.id, 0);
  sftp.end();
}

/**
 * Serves SFTP requests (what scp and sftp send) from the store until the channel closes. The channel
 * is accepted before the store is ready, so that no request sent meanwhile is lost.
 */
export function serveSftp(sftp: SFTPWrapper, storeReady: Promise<FileStore>, logger: Logger): void {
  storeReady.catch((error: Error) => logger.warn('sftp: the job\'s files cannot be reached', { error: error.message }));
  const handles = new Map<string, Handle>();
  let nextHandle = 0;
  const addHandle = (handle: Handle): Buffer => {
    const id = Buffer.from(String(nextHandle++));
    handles.set(id.toString(), handle);
    return id;
  };

  /** Runs one request; a thrown error becomes its status, with the file system's reason. */
  const answer = (reqId: number, work: (store: FileStore) => Promise<void>) => {
    storeReady.then(work).catch((error: unknown) => {
      const { code, message } = statusOf(error);
      sftp.status(reqId, code, message);
    });
  };
  /** Runs a request that answers only whether it worked. */
  const perform = (reqId: number, work: (store: FileStore) => Promise<void>) => answer(reqId, async (store) => {
    await work(store);
    sftp.status(reqId, STATUS_CODE.OK);
  });
  /** Runs a request that answers one path (realpath, readlink). */
  const answerPath = (reqId: number, work: (store: FileStore) => Promise<string>) => answer(reqId, async (store) => {
    const path = await work(store);
    sftp.name(reqId, [{ filename: path, longname: path, attrs: {} as Attributes }]);
  });
  const fileOf = (reqId: number, id: Buffer): OpenFile | undefined => {
    const handle = handles.get(id.toString());
    if (handle?.kind === 'file') return handle.file;
    sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
    return undefined;
  };

  sftp.on('OPEN', (reqId, path, flags, attrs) => answer(reqId, async (store) => {
    sftp.handle(reqId, addHandle({ kind: 'file', file: await store.open(path, openFlags(flags), attrs) }));
  }));
  sftp.on('READ', (reqId, id, offset, length) => {
    const file = fileOf(reqId, id);
    if (file) answer(reqId, async () => {
      const data = await file.read(offset, length);
      if (data === null) sftp.status(reqId, STATUS_CODE.EOF);
      else sftp.data(reqId, data);
    });
  });
  sftp.on('WRITE', (reqId, id, offset, data) => {
    const file = fileOf(reqId, id);
    if (file) perform(reqId, () => file.write(offset, data));
  });
  sftp.on('FSTAT', (reqId, id) => {
    const file = fileOf(reqId, id);
    if (file) answer(reqId, async () => sftp.attrs(reqId, await file.stat()));
  });
  sftp.on('FSETSTAT', (reqId, id, attrs) => {
    const file = fileOf(reqId, id);
    if (file) perform(reqId, () => file.setstat(attrs));
  });
  sftp.on('CLOSE', (reqId, id) => {
    const handle = handles.get(id.toString());
    handles.delete(id.toString());
    if (!handle) {
      sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      return;
    }
    perform(reqId, async () => {
      if (handle.kind === 'file') await handle.file.close();
    });
  });
  sftp.on('OPENDIR', (reqId, path) => answer(reqId, async (store) => {
    const attrs = await store.stat(path);
    if ((attrs.mode & 0o170000) !== 0o040000) throw Object.assign(new Error('Not a directory'), { code: 'ENOTDIR' });
    sftp.handle(reqId, addHandle({ kind: 'directory', path, listed: false }));
  }));
  sftp.on('READDIR', (reqId, id) => {
    const handle = handles.get(id.toString());
    if (handle?.kind !== 'directory') {
      sftp.status(reqId, STATUS_CODE.FAILURE, 'invalid handle');
      return;
    }
    if (handle.listed) {
      sftp.status(reqId, STATUS_CODE.EOF);
      return;
    }
    handle.listed = true;
    answer(reqId, async (store) => {
      const entries = await store.readdir(handle.path);
      sftp.name(reqId, entries.map(({ name, attrs }) => ({ filename: name, longname: longName(name, attrs), attrs })));
    });
  });
  sftp.on('STAT', (reqId, path) => answer(reqId, async (store) => sftp.attrs(reqId, await store.stat(path))));
  sftp.on('LSTAT', (reqId, path) => answer(reqId, async (store) => sftp.attrs(reqId, await store.lstat(path))));
  sftp.on('REALPATH', (reqId, path) => answerPath(reqId, (store) => store.realpath(path)));
  sftp.on('READLINK', (reqId, path) => answerPath(reqId, (store) => store.readlink(path)));
  sftp.on('SETSTAT', (reqId, path, attrs) => perform(reqId, (store) => store.setstat(path, attrs)));
  sftp.on('MKDIR', (reqId, path, attrs) => perform(reqId, (store) => store.mkdir(path, attrs)));
  sftp.on('RMDIR', (reqId, path) => perform(reqId, (store) => store.rmdir(path)));
  sftp.on('REMOVE', (reqId, path) => perform(reqId, (store) => store.remove(path)));
  sftp.on('RENAME', (reqId, from, to) => perform(reqId, (store) => store.rename(from, to)));
  sftp.on('SYMLINK', (reqId, target, linkPath) => perform(reqId, (store) => store.symlink(target, linkPath)));
  sftp.on('EXTENDED', (reqId) => sftp.status(reqId, STATUS_CODE.OP_UNSUPPORTED, 'extension not supported'));

  sftp.once('end', () => endSubsystem(sftp));
  sftp.once('close', () => {
    for (const handle of handles.values()) {
      if (handle.kind === 'file') handle.file.close().catch((error: Error) => logger.warn('sftp: could not close a file', { error: error.message }));
    }
    handles.clear();
  });
}
