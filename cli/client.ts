import { Value } from '@sinclair/typebox/value';
import { ApiError, type LogStreamItem } from '../api/objects.js';
import type { ProjectSettings } from './config.js';
import { CliError } from './errors.js';

/** An answer of the server other than 2xx; `status` and `code` let callers treat some of them as expected. */
export class ApiRequestError extends CliError {
  constructor(readonly status: number, readonly code: string, message: string, readonly details?: unknown) {
    super(message);
  }
}

/** A followed stream that broke off midway; following again may pick it up. */
export class ConnectionLostError extends CliError {}

/** Nothing answered at the server's address; whatever it runs goes on without this client. */
export class ServerUnreachableError extends CliError {}

const UNREACHABLE_CODES = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'ETIMEDOUT', 'UND_ERR_CONNECT_TIMEOUT']);

/** The management API of one server, as one user, scoped to one project. */
export class ApiClient {
  readonly url: string;
  readonly project: string;
  private readonly token: string;

  constructor(settings: Pick<ProjectSettings, 'url' | 'token' | 'name'>) {
    this.url = settings.url.replace(/\/+$/, '');
    this.project = settings.name;
    this.token = settings.token;
  }

  /** `/api/projects/<project><path>`. */
  projectPath(path: string): string {
    return `/api/projects/${encodeURIComponent(this.project)}${path}`;
  }

  async get<T>(path: string): Promise<T> {
    return this.request<T>('GET', path);
  }

  async post<T>(path: string, body: unknown = {}): Promise<T> {
    return this.request<T>('POST', path, body);
  }

  async delete<T>(path: string): Promise<T> {
    return this.request<T>('DELETE', path);
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    const response = await this.send(method, path, { body });
    const text = await response.text();
    if (!response.ok) throw this.errorOf(response.status, text);
    return (text === '' ? undefined : JSON.parse(text)) as T;
  }

  /** Reads a newline-delimited JSON stream until the server ends it or `signal` aborts. */
  async *stream<T = LogStreamItem>(path: string, signal: AbortSignal): AsyncGenerator<T> {
    const response = await this.send('GET', path, { signal });
    if (!response.ok) throw this.errorOf(response.status, await response.text());
    if (!response.body) return;
    const decoder = new TextDecoder();
    let buffered = '';
    try {
      for await (const chunk of response.body) {
        const lines = (buffered + decoder.decode(chunk as Uint8Array, { stream: true })).split('\n');
        buffered = lines.pop()!;
        for (const line of lines) if (line.trim() !== '') yield JSON.parse(line) as T;
      }
    } catch (error) {
      if (signal.aborted) return;
      throw new ConnectionLostError(`the connection to the server at ${this.url} broke: ${causeOf(error)}`);
    }
    if (buffered.trim() !== '') yield JSON.parse(buffered) as T;
  }

  private async send(method: string, path: string, options: { body?: unknown; signal?: AbortSignal }): Promise<Response> {
    const headers: Record<string, string> = { authorization: `Bearer ${this.token}` };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    try {
      return await fetch(`${this.url}${path}`, {
        method,
        headers,
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
        signal: options.signal,
      });
    } catch (error) {
      if (options.signal?.aborted) throw error;
      const code = (error as { cause?: { code?: string } }).cause?.code;
      if (code !== undefined && UNREACHABLE_CODES.has(code)) {
        throw new ServerUnreachableError(`the server at ${this.url} is not reachable (${code}); runs already submitted keep running there`);
      }
      throw new CliError(`request to ${this.url} failed: ${causeOf(error)}`);
    }
  }

  private errorOf(status: number, text: string): ApiRequestError {
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      body = undefined;
    }
    if (!Value.Check(ApiError, body)) {
      return new ApiRequestError(status, 'unexpected', `the server answered ${status}${text.trim() ? `: ${text.trim().slice(0, 200)}` : ''}`);
    }
    const { code, message, details } = body.error;
    if (status !== 401) return new ApiRequestError(status, code, message, details);
    return new ApiRequestError(status, code, [
      `the server at ${this.url} refused the token of project ${this.project} (${message});`,
      `set a new one with: orchestrator project add --name ${this.project} --url ${this.url} --token TOKEN`,
    ].join(' '), details);
  }
}

function causeOf(error: unknown): string {
  const cause = (error as { cause?: { message?: string } }).cause;
  return cause?.message ?? (error as Error).message ?? String(error);
}
