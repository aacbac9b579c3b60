import { protocol, types, type messages, type ParserOptions } from '@electric-sql/pglite';
import type { Row } from './db.js';

const COMMAND_COMPLETE = 0x43;
const DATA_ROW = 0x44;
const ERROR_RESPONSE = 0x45;
const NOTIFICATION_RESPONSE = 0x41;

export interface Notification {
  channel: string;
  payload: string;
}

/** What the database answered to one run of a statement: its rows, its error, and the notifications that came with it. */
export interface Answer {
  rows: Row[];
  error: messages.DatabaseError | null;
  notifications: Notification[];
  /** The tag of each statement that completed (`INSERT 0 1`, `COMMIT`, or `ROLLBACK` for a COMMIT of a failed transaction). */
  commands: string[];
}

/**
 * Reads the protocol messages the embedded database answered with (bind, execute and sync of a kept statement) from
 * their bytes: each field decoded where it lies, then converted by its column's type with PGlite's own parsers.
 * PGlite's message parser copies every field into an ArrayBuffer of its own before decoding it, which at 10 000 runs
 * was the largest part of reading rows on the server's thread (bench/README.md, "Rows read from the answer's bytes").
 * An error is parsed by PGlite's parser, so that it carries the same fields; as PGlite does, what follows an error is
 * ignored.
 */
export function readAnswer(answer: Buffer, columns: messages.RowDescriptionMessage | undefined, parsers: ParserOptions): Answer {
  const rows: Row[] = [];
  const notifications: Notification[] = [];
  const commands: string[] = [];
  let error: messages.DatabaseError | null = null;
  for (let at = 0; at < answer.length && !error;) {
    const code = answer[at]!;
    const end = at + 1 + answer.readInt32BE(at + 1);
    if (code === DATA_ROW && columns) rows.push(readRow(answer, at + 5, columns.fields, parsers));
    else if (code === NOTIFICATION_RESPONSE) notifications.push(readNotification(answer, at + 5));
    else if (code === COMMAND_COMPLETE) commands.push(answer.toString('utf8', at + 5, end - 1));
    else if (code === ERROR_RESPONSE) error = readError(answer.subarray(at, end));
    at = end;
  }
  return { rows, error, notifications, commands };
}

function readRow(answer: Buffer, at: number, fields: messages.Field[], parsers: ParserOptions): Row {
  const row: Row = {};
  const count = answer.readInt16BE(at);
  at += 2;
  for (let i = 0; i < count; i++) {
    const length = answer.readInt32BE(at);
    at += 4;
    const field = fields[i]!;
    if (length === -1) {
      row[field.name] = null;
      continue;
    }
    row[field.name] = types.parseType(answer.toString('utf8', at, at + length), field.dataTypeID, parsers);
    at += length;
  }
  return row;
}

/** A NotificationResponse's body: the notifying process's id, then the channel and the payload, each ended by a zero byte. */
function readNotification(answer: Buffer, at: number): Notification {
  const channelEnd = answer.indexOf(0, at + 4);
  const payloadEnd = answer.indexOf(0, channelEnd + 1);
  return { channel: answer.toString('utf8', at + 4, channelEnd), payload: answer.toString('utf8', channelEnd + 1, payloadEnd) };
}

function readError(message: Buffer): messages.DatabaseError {
  let error: messages.DatabaseError | undefined;
  new protocol.Parser().parse(message, (parsed) => {
    if (parsed.name === 'error') error = parsed as messages.DatabaseError;
  });
  return error!;
}
