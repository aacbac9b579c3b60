import {
  Agent, request, type ClientRequest, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse,
} from 'node:http';

/**
 * Idle pooled connections are closed after this long, under the 5 s keep-alive of Node servers (and of most
 * others), so a request is never sent on a connection at the moment its far end closes it.
 */
export const POOLED_SOCKET_IDLE_MS = 4000;

/** A keep-alive pool for forwards. */
export function forwardingPool(): Agent {
  return new Agent({ keepAlive: true, timeout: POOLED_SOCKET_IDLE_MS });
}

/**
 * Whether a failed forward may be sent again as it was: the far end closed a pooled connection just as it was
 * reused (Node's own advice), and the request has no body that is already gone.
 */
export function staleConnection(proxyReq: ClientRequest, error: Error & { code?: string }, bodyless: boolean): boolean {
  return proxyReq.reusedSocket && error.code === 'ECONNRESET' && bodyless;
}

/** A request that declares no body (a GET as browsers and clients send it). */
export function hasNoBody(req: IncomingMessage): boolean {
  return req.headers['transfer-encoding'] === undefined && (req.headers['content-length'] === undefined || req.headers['content-length'] === '0');
}

/** Headers that describe one connection rather than the exchange: a proxy never passes them on. */
export const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade']);

export interface Outgoing {
  host: string;
  port: number;
  /** Path and query as the upstream receives them. */
  path: string;
  /** Name, value pairs (`requestHeaders`). */
  headers: string[];
  agent: Agent;
  /** From the moment the request is sent whole to the answer's headers; past it the request is destroyed with `timeoutError()`. */
  firstByteTimeoutMs: number;
  timeoutError(): Error;
  /** The body when it has been read already; otherwise it streams from the incoming request. */
  body?: Buffer;
}

/**
 * Sends an incoming request on, its body streaming: one `http.request` and a pipe, cheaper per request than the
 * proxy library (docs/ARCHITECTURE.md says by how much). The caller handles the answer and the errors.
 */
export function sendOn(req: IncomingMessage, outgoing: Outgoing): ClientRequest {
  const { host, port, path, agent, body } = outgoing;
  // Raw headers go out as they are: a request that came without Host (HTTP/1.0) gets the upstream's, as Node would add it.
  const headers = req.headers.host === undefined ? [...outgoing.headers, 'host', `${host.includes(':') ? `[${host}]` : host}:${port}`] : outgoing.headers;
  const proxyReq = request({ host, port, path, method: req.method, headers, agent });
  awaitFirstByte(proxyReq, outgoing.firstByteTimeoutMs, outgoing.timeoutError);
  // A request without a body goes out whole at once, with nothing to pipe.
  if (body) proxyReq.end(body);
  else if (hasNoBody(req)) proxyReq.end();
  else req.pipe(proxyReq);
  return proxyReq;
}

export function awaitFirstByte(proxyReq: ClientRequest, timeoutMs: number, timeoutError: () => Error): void {
  proxyReq.once('finish', () => {
    const timer = setTimeout(() => proxyReq.destroy(timeoutError()), timeoutMs);
    const answered = () => clearTimeout(timer);
    proxyReq.once('response', answered).once('upgrade', answered).once('close', answered);
  });
}

/**
 * A request's headers as they go on, less the connection's own and `removed`, as the name, value pairs that
 * `http.request` writes as they are (an object would be copied and checked header by header first). Transfer-Encoding
 * stays: it frames the body that follows, and Node frames the outgoing body by it.
 */
export function requestHeaders(headers: IncomingHttpHeaders, removed: readonly string[] = []): string[] {
  const kept: string[] = [];
  for (const name in headers) {
    if ((HOP_BY_HOP.has(name) && name !== 'transfer-encoding') || removed.includes(name)) continue;
    const value = headers[name];
    if (typeof value === 'string') kept.push(name, value);
    else if (value) for (const each of value) kept.push(name, each);
  }
  return kept;
}

/** An answer's raw headers less those that describe the connection it came on; Node frames the answer again. */
export function responseHeaders(rawHeaders: string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    if (!HOP_BY_HOP.has(rawHeaders[i]!.toLowerCase())) kept.push(rawHeaders[i]!, rawHeaders[i + 1]!);
  }
  return kept;
}

/**
 * Sends an answer's head (already given to `writeHead`) on its own when its body has not begun by the next
 * turn of the event loop: a small answer goes out in one write, and one that starts quiet is still seen as answered.
 */
export function flushHeadIfQuiet(proxyRes: IncomingMessage, res: ServerResponse): void {
  setImmediate(() => {
    if (!proxyRes.readableDidRead && !res.writableEnded && !res.destroyed) res.flushHeaders();
  });
}

/**
 * Streams the answer's body to the client, pausing while the client is slower; either side's end cuts the other.
 * `onChunk` sees each chunk as it passes. (Relayed by hand: `stream.pipeline` would cost an AbortController and
 * a DOMException per answer, a sixth of a forward's CPU, and `pipe` half a dozen listeners on each side.)
 */
export function passBody(proxyRes: IncomingMessage, res: ServerResponse, onChunk?: () => void): void {
  proxyRes.on('data', (chunk: Buffer) => {
    onChunk?.();
    if (!res.write(chunk)) proxyRes.pause();
  });
  res.on('drain', () => proxyRes.resume());
  proxyRes.once('end', () => { if (!res.destroyed) res.end(); });
  proxyRes.once('error', () => res.destroy());
  res.once('close', () => { if (!proxyRes.complete) proxyRes.destroy(); });
}
