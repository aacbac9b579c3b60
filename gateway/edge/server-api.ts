import type { GatewayConfig, GatewayStatsReport } from '../../api/gateway-process.js';
import type { ServiceSecond } from '../../store/service-stats.js';

/** A call to the server gets this long: a server that does not answer is treated as down, and the last copy serves. */
const CALL_TIMEOUT_MS = 5000;
/** Seconds per statistics report, within what the server takes in one. */
const SECONDS_PER_REPORT = 5000;

export class ServerCallError extends Error {
  constructor(message: string, readonly status: number | null) {
    super(message);
  }
}

/** The gateway process's side of `/api/gateway/...`: every call carries the token its server started it with. */
export class ServerApi {
  constructor(private readonly url: string, private readonly token: string) {}

  config(): Promise<GatewayConfig> {
    return this.call<GatewayConfig>('GET', '/config');
  }

  async reportStats(seconds: ServiceSecond[]): Promise<void> {
    for (let from = 0; from < seconds.length; from += SECONDS_PER_REPORT) {
      const report: GatewayStatsReport = {
        seconds: seconds.slice(from, from + SECONDS_PER_REPORT).map((s) => ({ ...s, second: s.second.toISOString() })),
      };
      await this.call('POST', '/stats', report);
    }
  }

  async wake(): Promise<void> {
    await this.call('POST', '/wake', {});
  }

  async saveCertificate(hostname: string, certificatePem: string, keyPem: string): Promise<void> {
    await this.call('PUT', `/certificates/${encodeURIComponent(hostname)}`, { certificatePem, keyPem });
  }

  async reportFailure(hostname: string, error: string): Promise<void> {
    await this.call('POST', `/certificates/${encodeURIComponent(hostname)}/failure`, { error: error.slice(0, 4096) });
  }

  async saveAccountKey(keyPem: string): Promise<void> {
    await this.call('PUT', '/account-key', { keyPem });
  }

  private async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    let response: Response;
    try {
      response = await fetch(`${this.url}/api/gateway${path}`, {
        method,
        headers: { authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
      });
    } catch (error) {
      const cause = (error as { cause?: { code?: string } }).cause?.code ?? (error as Error).message;
      throw new ServerCallError(`the server at ${this.url} did not answer: ${cause}`, null);
    }
    const text = await response.text();
    if (!response.ok) {
      let message = text;
      try {
        message = (JSON.parse(text) as { error: { message: string } }).error.message;
      } catch {
        // not the API's error shape: the text as it came
      }
      throw new ServerCallError(`${method} ${path}: ${response.status}: ${message}`, response.status);
    }
    return (text ? JSON.parse(text) : undefined) as T;
  }
}
