import { STATUS_CODES, type IncomingHttpHeaders } from 'node:http';
import { request as httpRequest } from 'undici';
import { AGENT_FORWARD_AUTH_HEADER, LOG_LINES_HEADERS, type AgentHealth, type AgentMetrics, type JobStatus, type JobsChanges, type JobsChangesRequest, type JobsWatch, type JobsWatchRequest, type JobSubmission, type LogsPage } from '../api/agent.js';
import type { StopRequest } from './requests.js';

export const DEFAULT_AGENT_TIMEOUT_MS = 10_000;

/** The agent answered with a non-2xx status. `code` is the API's error code (e.g. job_not_found). */
export class AgentError extends Error {
  constructor(message: string, readonly status: number, readonly code: string, readonly details?: unknown) {
    super(message);
    this.name = 'AgentError';
  }
}

/** No answer from the agent: connection refused or reset, timeout, or a broken response. */
export class AgentUnreachableError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'AgentUnreachableError';
  }
}

/** A page of a job's log entries as the agent stores them: `jsonLines` holds `count` entries, `first` to `next`. */
export interface LogLinesPage {
  jsonLines: string;
  first: number;
  next: number;
  count: number;
  finished: boolean;
}

type AgentMethod = 'GET' | 'POST' | 'DELETE';

/** Calls one agent's HTTP API. Each call has its own timeout (long-polls get their wait on top). */
export class AgentClient {
  private readonly baseUrl: string;
  private readonly timeoutMs: number;

  constructor(baseUrl: string, private readonly token: string, options: { timeoutMs?: number } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.timeoutMs = options.timeoutMs ?? DEFAULT_AGENT_TIMEOUT_MS;
  }

  health(): Promise<AgentHealth> {
    return this.call('GET', '/api/health');
  }

  /** Idempotent: a jobId the agent already has returns that job's status and starts nothing. */
  submit(job: JobSubmission): Promise<JobStatus> {
    return this.call('POST', '/api/jobs', job);
  }

  job(jobId: string): Promise<JobStatus> {
    return this.call('GET', `/api/jobs/${encodeURIComponent(jobId)}`);
  }

  /** Entries with seq > after; with `waitMs`, the agent holds the request until one exists (at most 30 s). */
  logs(jobId: string, after: number, waitMs = 0): Promise<LogsPage> {
    const query = new URLSearchParams({ after: String(after), wait: String(waitMs) });
    return this.call('GET', `/api/jobs/${encodeURIComponent(jobId)}/logs?${query}`, undefined, this.timeoutMs + waitMs);
  }

  /**
   * The status and the new entries of many jobs in one call, each after its own `after`; null from an agent older than
   * this call (it answers 404 or 405 for the route), which is then asked job by job.
   */
  async watchJobs(jobs: JobsWatchRequest['jobs']): Promise<JobsWatch | null> {
    try {
      return await this.call<JobsWatch>('POST', '/api/jobs/watch', { jobs });
    } catch (error) {
      if (error instanceof AgentError && (error.status === 404 || error.status === 405)) return null;
      throw error;
    }
  }

  /**
   * Held by the agent until one of `jobs` is no longer in the state given (or `waitMs` passed): those that changed,
   * none when none did. Null from an agent older than this call (404 or 405). `signal` gives up on it.
   */
  async jobChanges(jobs: JobsChangesRequest['jobs'], waitMs: number, signal?: AbortSignal): Promise<JobsChanges | null> {
    try {
      return await this.call<JobsChanges>('POST', '/api/jobs/changes', { jobs, waitMs }, this.timeoutMs + waitMs, signal);
    } catch (error) {
      if (error instanceof AgentError && (error.status === 404 || error.status === 405)) return null;
      throw error;
    }
  }

  /** Signals the job and returns at once; poll `job()` for the final `stopped` state. */
  stop(jobId: string, options: StopRequest = {}): Promise<JobStatus> {
    return this.call('POST', `/api/jobs/${encodeURIComponent(jobId)}/stop`, options);
  }

  /** Removes a finished job, its container and its files. */
  async remove(jobId: string): Promise<void> {
    await this.call('DELETE', `/api/jobs/${encodeURIComponent(jobId)}`);
  }

  /**
   * Where a running job's declared port is reached through this agent: the URL for `path` (which may carry a
   * query) and the headers to send with it, upgrades included. The agent's token travels in its own header,
   * so the caller's `Authorization` reaches the job. The agent streams both ways; see docs/agent.md.
   */
  portAccess(jobId: string, port: number, path = '/'): { url: string; headers: Record<string, string> } {
    const suffix = path.startsWith('/') ? path : `/${path}`;
    return {
      url: `${this.baseUrl}/api/jobs/${encodeURIComponent(jobId)}/ports/${port}${suffix}`,
      headers: { [AGENT_FORWARD_AUTH_HEADER]: `Bearer ${this.token}` },
    };
  }

  metrics(): Promise<AgentMetrics> {
    return this.call('GET', '/api/metrics');
  }

  /** The samples the agent took in the background while the job ran (the last hour at most), oldest first. */
  metricsHistory(jobId: string): Promise<AgentMetrics[]> {
    return this.call('GET', `/api/jobs/${encodeURIComponent(jobId)}/metrics/history`);
  }

  /** As `logs`, as the agent stores them: JSON lines, for copying without parsing each entry. */
  async logLines(jobId: string, after: number, waitMs = 0): Promise<LogLinesPage> {
    const query = new URLSearchParams({ after: String(after), wait: String(waitMs), format: 'jsonl' });
    const { headers, text } = await this.request('GET', `/api/jobs/${encodeURIComponent(jobId)}/logs?${query}`, undefined, this.timeoutMs + waitMs);
    const header = (name: string) => String(headers[name] ?? '');
    const first = Number(header(LOG_LINES_HEADERS.first));
    const next = Number(header(LOG_LINES_HEADERS.next));
    if (!Number.isInteger(first) || !Number.isInteger(next)) throw new AgentUnreachableError(`agent sent a log page without its ${LOG_LINES_HEADERS.first} and ${LOG_LINES_HEADERS.next} headers`);
    return { jsonLines: text, first, next, count: text === '' ? 0 : next - first + 1, finished: header(LOG_LINES_HEADERS.finished) === 'true' };
  }

  private async call<T>(method: AgentMethod, path: string, body?: unknown, timeoutMs = this.timeoutMs, signal?: AbortSignal): Promise<T> {
    const { status, text } = await this.request(method, path, body, timeoutMs, signal);
    if (status === 204 || text.length === 0) return undefined as T;
    const parsed = parseJson(text);
    if (parsed === undefined) throw new AgentUnreachableError(`agent sent a response that is not JSON (${method} ${this.baseUrl}${path})`);
    return parsed as T;
  }

  /**
   * The answer's status, headers and text; an error for no answer or an answer outside 2xx. Through undici's `request`,
   * not `fetch`: a call cost the server 300 µs of CPU through `fetch` and 70 µs so (bench/README.md), and the server
   * makes hundreds a second at 10 000 runs.
   */
  private async request(method: AgentMethod, path: string, body: unknown, timeoutMs: number, signal?: AbortSignal): Promise<{ status: number; headers: IncomingHttpHeaders; text: string }> {
    const where = `${method} ${this.baseUrl}${path}`;
    let status: number;
    let headers: IncomingHttpHeaders;
    let text: string;
    // Cleared once answered: AbortSignal.timeout's timer fires later all the same and makes an exception each time.
    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(new DOMException(`no answer within ${timeoutMs} ms`, 'TimeoutError')), timeoutMs);
    try {
      const response = await httpRequest(`${this.baseUrl}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: signal ? AbortSignal.any([signal, timeout.signal]) : timeout.signal,
      });
      ({ statusCode: status, headers } = response);
      text = await response.body.text();
    } catch (error) {
      const cause = error as Error & { cause?: { message?: string } };
      const reason = cause.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : cause.cause?.message ?? cause.message;
      throw new AgentUnreachableError(`agent unreachable (${where}): ${reason}`, { cause: error });
    } finally {
      clearTimeout(timer);
    }
    if (status < 200 || status > 299) {
      const failure = parseJson(text) as { error?: { code?: string; message?: string; details?: unknown } } | undefined;
      const code = failure?.error?.code ?? `http_${status}`;
      const message = failure?.error?.message ?? (text.trim() || STATUS_CODES[status] || '');
      throw new AgentError(`agent answered ${status} (${where}): ${message}`, status, code, failure?.error?.details);
    }
    return { status, headers, text };
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
