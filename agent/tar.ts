import { posix } from 'node:path';

/** One regular file of a tar archive. `path` is relative to where the archive is extracted, and never leaves it. */
export interface TarFile {
  path: string;
  content: Buffer;
  mode: number;
}

const BLOCK = 512;

/**
 * A POSIX tar archive (ustar, with a PAX header for paths longer than 100 bytes) of regular files,
 * the format the Docker Engine API takes to put files into a container. Paths are resolved as from
 * the root of the extraction (`..` stops there, as `cd ..` does at `/`), so no entry can lead out of
 * it; modes keep their permission bits only.
 */
export function createTar(files: readonly TarFile[]): Buffer {
  const mtime = Math.floor(Date.now() / 1000);
  const parts: Buffer[] = [];
  for (const file of files) {
    const path = posix.normalize(`/${file.path}`).slice(1);
    if (path.length === 0 || path.includes('\u0000')) throw new Error(`a file in a tar archive needs a name without NUL characters, got ${JSON.stringify(file.path)}`);
    if (Buffer.byteLength(path) > 100) {
      const record = paxRecord('path', path);
      parts.push(header({ name: 'PaxHeader', size: record.length, mode: 0o644, mtime, type: 'x' }), padded(record));
    }
    parts.push(header({ name: truncateUtf8(path, 100), size: file.content.length, mode: file.mode, mtime, type: '0' }), padded(file.content));
  }
  parts.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(parts);
}

interface Header {
  name: string;
  size: number;
  mode: number;
  mtime: number;
  type: '0' | 'x';
}

function header(fields: Header): Buffer {
  const block = Buffer.alloc(BLOCK);
  block.write(fields.name, 0, 100, 'utf8');
  octal(block, 100, 8, fields.mode & 0o777);
  octal(block, 108, 8, 0);
  octal(block, 116, 8, 0);
  octal(block, 124, 12, fields.size);
  octal(block, 136, 12, fields.mtime);
  block.write(' '.repeat(8), 148, 8, 'ascii');
  block.write(fields.type, 156, 1, 'ascii');
  block.write('ustar\u000000', 257, 8, 'ascii');
  block.write('root', 265, 32, 'ascii');
  block.write('root', 297, 32, 'ascii');
  let checksum = 0;
  for (const byte of block) checksum += byte;
  block.write(checksum.toString(8).padStart(6, '0') + '\u0000 ', 148, 8, 'ascii');
  return block;
}

function octal(block: Buffer, offset: number, length: number, value: number): void {
  block.write(value.toString(8).padStart(length - 1, '0') + '\u0000', offset, length, 'ascii');
}

/** A PAX record "LEN key=value\n" where LEN counts the whole record, its own digits included. */
function paxRecord(key: string, value: string): Buffer {
  const body = ` ${key}=${value}\n`;
  let length = Buffer.byteLength(body) + 1;
  while (String(length).length + Buffer.byteLength(body) !== length) length = String(length).length + Buffer.byteLength(body);
  return Buffer.from(`${length}${body}`);
}

function padded(content: Buffer): Buffer {
  const remainder = content.length % BLOCK;
  return remainder === 0 ? content : Buffer.concat([content, Buffer.alloc(BLOCK - remainder)]);
}

function truncateUtf8(text: string, bytes: number): string {
  const encoded = Buffer.from(text);
  return encoded.length <= bytes ? text : encoded.subarray(0, bytes).toString('utf8').replace(/\uFFFD+$/, '');
}
