import { STATUS_CODES, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ApiError } from '../api/objects.js';

/** A refusal or failure the gateway answers itself, before or instead of a replica's answer. */
export class GatewayError extends Error {
  constructor(readonly status: number, readonly code: string, message: string, readonly headers: Record<string, string> = {}) {
    super(message);
    this.name = 'GatewayError';
  }
}

/** The service proxy speaks the management API's error shape; the model endpoint speaks OpenAI's, which its clients parse. */
export type ErrorShape = 'api' | 'openai';

/** OpenAI's error object: clients read `message`, `type` and `code` from it. */
export interface OpenAiError {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export function errorBody(error: GatewayError, shape: ErrorShape): string {
  if (shape === 'api') {
    const body: ApiError = { error: { code: error.code, message: error.message } };
    return JSON.stringify(body);
  }
  const body: OpenAiError = {
    error: {
      message: error.message,
      type: error.status >= 500 ? 'server_error' : 'invalid_request_error',
      param: error.code === 'model_not_found' || error.code === 'model_missing' ? 'model' : null,
      code: error.code === 'invalid_json' ? null : error.code,
    },
  };
  return JSON.stringify(body);
}

/**
 * Answers with the error unless an answer has begun, in which case the connection is cut: the client sees a truncated answer, never a wrong one.
 * `answerHeaders`: those the gateway puts on every answer (ProxyCore's).
 */
export function sendError(res: ServerResponse, error: GatewayError, shape: ErrorShape, answerHeaders: Record<string, string> = {}): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = errorBody(error, shape);
  // A body refused part way is not read to its end: the connection cannot carry another request.
  const closing = error.status === 413 ? { connection: 'close' } : {};
  res.writeHead(error.status, { ...answerHeaders, ...error.headers, ...closing, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** Answers an upgrade request that will not be forwarded, on its raw socket. */
export function refuseUpgrade(socket: Duplex, error: GatewayError): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const body = errorBody(error, 'api');
  const headers = { ...error.headers, 'Content-Type': 'application/json', 'Content-Length': String(Buffer.byteLength(body)), Connection: 'close' };
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('');
  socket.end(`HTTP/1.1 ${error.status} ${STATUS_CODES[error.status] ?? ''}\r\n${head}\r\n${body}`);
}
