const BIND = 0x42;
/** Execute of the unnamed portal, every row. */
export const EXECUTE = Buffer.from([0x45, 0, 0, 0, 9, 0, 0, 0, 0, 0]);
/** Sync: the end of a statement's messages (and of its implicit transaction). */
export const SYNC = Buffer.from([0x53, 0, 0, 0, 4]);

/**
 * The Bind message of a statement to the unnamed portal: every parameter in text, as `values` hold them (null for
 * NULL), and every column answered in text. Written here, each value's length measured and its bytes written by
 * Node's native UTF-8 code: PGlite's serializer counts the UTF-8 length of a value in JavaScript, character by
 * character, twice, which for a page of log lines was the largest part of sending a statement (bench/README.md,
 * "Where the server's thread goes at 10 000 runs").
 */
export function bindMessage(statement: string, values: ReadonlyArray<string | null>): Buffer {
  const lengths = values.map((value) => (value === null ? -1 : Buffer.byteLength(value)));
  // Length, portal '' and the statement's name (each ended by a zero byte), format codes (none: all text), values, result formats (none: all text).
  let length = 4 + 1 + Buffer.byteLength(statement) + 1 + 2 + 2 + 2;
  for (const valueLength of lengths) length += 4 + Math.max(valueLength, 0);
  const message = Buffer.allocUnsafe(1 + length);
  message[0] = BIND;
  let at = message.writeInt32BE(length, 1);
  message[at++] = 0;
  at += message.write(statement, at);
  message[at++] = 0;
  at = message.writeInt16BE(0, at);
  at = message.writeInt16BE(values.length, at);
  for (let i = 0; i < values.length; i++) {
    at = message.writeInt32BE(lengths[i]!, at);
    if (values[i] !== null) at += message.write(values[i]!, at);
  }
  message.writeInt16BE(0, at);
  return message;
}
