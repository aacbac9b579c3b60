// A WebSocket echo service (RFC 6455, no extensions): every text or binary message comes back
// as sent, pings get their pong, a close gets its close. Plain Node, no dependencies, so that an
// instance with Node alone can run it. `GET /` answers a short text for plain HTTP clients.
//   PORT (default 8080), MAX_MESSAGE_BYTES (default 16 MiB)
import { createServer } from 'node:http';
import { createHash } from 'node:crypto';

const port = Number(process.env.PORT ?? 8080);
const maxMessageBytes = Number(process.env.MAX_MESSAGE_BYTES ?? 16 * 1024 * 1024);
const handshakeGuid = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

const Opcode = { continuation: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa };
const CloseCode = { normal: 1000, protocolError: 1002, invalidData: 1007, tooBig: 1009 };

class ProtocolError extends Error {
  constructor(code, reason) {
    super(reason);
    this.code = code;
  }
}

/** Bytes received but not yet parsed, kept as a list of chunks so that a large message is copied once. */
class ByteQueue {
  chunks = [];
  length = 0;

  push(chunk) {
    this.chunks.push(chunk);
    this.length += chunk.length;
  }

  /** The first `count` bytes (a frame header's few), without consuming them. */
  peek(count) {
    const parts = [];
    let gathered = 0;
    for (const chunk of this.chunks) {
      if (gathered >= count) break;
      parts.push(chunk);
      gathered += chunk.length;
    }
    return (parts.length === 1 ? parts[0] : Buffer.concat(parts)).subarray(0, count);
  }

  take(count) {
    const taken = Buffer.allocUnsafe(count);
    let filled = 0;
    while (filled < count) {
      const chunk = this.chunks[0];
      const used = Math.min(chunk.length, count - filled);
      chunk.copy(taken, filled, 0, used);
      filled += used;
      if (used === chunk.length) this.chunks.shift();
      else this.chunks[0] = chunk.subarray(used);
    }
    this.length -= count;
    return taken;
  }
}

/** The frame header at the start of `queue`, or null until all of it has arrived. */
function readHeader(queue) {
  if (queue.length < 2) return null;
  const [first, second] = queue.peek(2);
  const lengthField = second & 0x7f;
  const lengthBytes = lengthField === 126 ? 2 : lengthField === 127 ? 8 : 0;
  const headerBytes = 2 + lengthBytes + ((second & 0x80) ? 4 : 0);
  if (queue.length < headerBytes) return null;
  const header = queue.peek(headerBytes);
  const length = lengthField === 126 ? header.readUInt16BE(2) : lengthField === 127 ? Number(header.readBigUInt64BE(2)) : lengthField;
  return {
    fin: (first & 0x80) !== 0,
    reserved: first & 0x70,
    opcode: first & 0x0f,
    masked: (second & 0x80) !== 0,
    length,
    headerBytes,
    mask: (second & 0x80) ? header.subarray(2 + lengthBytes, headerBytes) : null,
  };
}

function encodeFrame(opcode, payload) {
  const lengthBytes = payload.length < 126 ? 0 : payload.length < 0x10000 ? 2 : 8;
  const header = Buffer.alloc(2 + lengthBytes);
  header[0] = 0x80 | opcode;
  if (lengthBytes === 0) header[1] = payload.length;
  else if (lengthBytes === 2) {
    header[1] = 126;
    header.writeUInt16BE(payload.length, 2);
  } else {
    header[1] = 127;
    header.writeBigUInt64BE(BigInt(payload.length), 2);
  }
  return Buffer.concat([header, payload]);
}

function closePayload(code, reason = '') {
  const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
  payload.writeUInt16BE(code, 0);
  payload.write(reason, 2);
  return payload;
}

const utf8 = new TextDecoder('utf-8', { fatal: true });

function isUtf8(bytes) {
  try {
    utf8.decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/** One connection after the handshake: parses the client's frames and answers them. */
function serveConnection(socket, head) {
  const queue = new ByteQueue();
  let message = null;
  let closing = false;

  const send = (opcode, payload) => {
    if (!socket.write(encodeFrame(opcode, payload))) {
      socket.pause();
      socket.once('drain', () => socket.resume());
    }
  };
  const close = (code, reason) => {
    if (closing) return;
    closing = true;
    send(Opcode.close, code === null ? Buffer.alloc(0) : closePayload(code, reason));
    socket.end();
  };

  const onFrame = (frame, payload) => {
    if (frame.opcode >= Opcode.close) {
      if (!frame.fin || payload.length > 125) throw new ProtocolError(CloseCode.protocolError, 'fragmented or oversized control frame');
      if (frame.opcode === Opcode.ping) send(Opcode.pong, payload);
      else if (frame.opcode === Opcode.close) close(payload.length >= 2 ? payload.readUInt16BE(0) : null, '');
      else if (frame.opcode !== Opcode.pong) throw new ProtocolError(CloseCode.protocolError, `unknown opcode ${frame.opcode}`);
      return;
    }
    if (frame.opcode === Opcode.continuation) {
      if (!message) throw new ProtocolError(CloseCode.protocolError, 'continuation without a message');
    } else if (frame.opcode === Opcode.text || frame.opcode === Opcode.binary) {
      if (message) throw new ProtocolError(CloseCode.protocolError, 'new message before the last one ended');
      message = { opcode: frame.opcode, parts: [], length: 0 };
    } else {
      throw new ProtocolError(CloseCode.protocolError, `unknown opcode ${frame.opcode}`);
    }
    message.parts.push(payload);
    message.length += payload.length;
    if (message.length > maxMessageBytes) throw new ProtocolError(CloseCode.tooBig, `message larger than ${maxMessageBytes} bytes`);
    if (!frame.fin) return;
    const data = Buffer.concat(message.parts);
    if (message.opcode === Opcode.text && !isUtf8(data)) throw new ProtocolError(CloseCode.invalidData, 'text message is not UTF-8');
    send(message.opcode, data);
    message = null;
  };

  const parse = () => {
    for (;;) {
      if (closing) return;
      const frame = readHeader(queue);
      if (!frame) return;
      if (frame.reserved !== 0) throw new ProtocolError(CloseCode.protocolError, 'reserved bits set without an extension');
      if (!frame.masked) throw new ProtocolError(CloseCode.protocolError, 'client frames must be masked');
      if (frame.length > maxMessageBytes) throw new ProtocolError(CloseCode.tooBig, `frame larger than ${maxMessageBytes} bytes`);
      if (queue.length < frame.headerBytes + frame.length) return;
      queue.take(frame.headerBytes);
      const payload = queue.take(frame.length);
      for (let index = 0; index < payload.length; index++) payload[index] ^= frame.mask[index & 3];
      onFrame(frame, payload);
    }
  };

  const receive = (chunk) => {
    if (closing) return;
    queue.push(chunk);
    try {
      parse();
    } catch (error) {
      if (!(error instanceof ProtocolError)) throw error;
      close(error.code, error.message);
    }
  };

  socket.setNoDelay(true);
  socket.on('data', receive);
  socket.on('error', () => socket.destroy());
  if (head.length > 0) receive(head);
}

function refuseUpgrade(socket, reason) {
  socket.end(`HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\nconnection: close\r\n\r\n${reason}\n`);
}

const server = createServer((req, res) => {
  const { pathname } = new URL(req.url ?? '/', 'http://localhost');
  if (req.method === 'GET' && pathname === '/') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ws-echo: open a WebSocket on this address; every message comes back as sent.\n');
  } else if (req.method === 'GET' && pathname === '/health') {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok\n');
  } else {
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end(`not found: ${req.method} ${pathname}\n`);
  }
});

server.on('upgrade', (req, socket, head) => {
  const key = req.headers['sec-websocket-key'];
  if (req.headers.upgrade?.toLowerCase() !== 'websocket') return refuseUpgrade(socket, 'only WebSocket upgrades are served');
  if (req.headers['sec-websocket-version'] !== '13') return refuseUpgrade(socket, 'Sec-WebSocket-Version must be 13');
  if (typeof key !== 'string' || Buffer.from(key, 'base64').length !== 16) return refuseUpgrade(socket, 'Sec-WebSocket-Key must be 16 bytes in base64');
  const accept = createHash('sha1').update(key + handshakeGuid).digest('base64');
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: ${accept}\r\n\r\n`);
  serveConnection(socket, head);
});

server.listen(port, '0.0.0.0', () => {
  console.log(`ws-echo: listening on 0.0.0.0:${server.address().port}`);
});

// As a container's first process, Node would otherwise ignore these signals.
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
