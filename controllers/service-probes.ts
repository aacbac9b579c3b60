import type { IncomingHttpHeaders } from 'node:http';
import { request, type Dispatcher } from 'undici';
import { fillSecrets, secretNamesIn } from '../api/interpolation.js';
import type { ProbeSettings } from '../api/service-settings.js';
import { AgentClient } from '../agent/client.js';
import type { Queryable } from '../store/db.js';
import type { InstanceRecord } from '../store/instances.js';
import { requiredSecrets, type SecretBox } from '../store/secrets.js';

/** Codes the agent's port forward answers with itself: the job, not the service, is what failed. */
const AGENT_FORWARD_ERRORS = new Set(['upstream_refused', 'upstream_failed', 'upstream_timeout', 'port_not_declared', 'job_not_running', 'job_not_found']);

export type ProbeResult = { ok: true } | { ok: false; reason: string };

/** Where the values of the secrets that probe headers name are found: the service's project. */
export interface ProbeSecrets {
  db: Queryable;
  box: SecretBox;
  projectId: string;
}

/** The probe's headers with their `${{ secrets.NAME }}` filled in, or why they cannot be. */
async function probeHeaders(probe: ProbeSettings, secrets: ProbeSecrets): Promise<ProbeSettings['headers'] | string> {
  const names = secretNamesIn(probe.headers);
  if (names.length === 0) return probe.headers;
  const values = await requiredSecrets(secrets.db, secrets.box, secrets.projectId, names);
  return typeof values === 'string' ? `headers: ${values}` : fillSecrets(probe.headers, values);
}

/** Sends one probe to a replica's port through its instance's agent, as the gateway reaches it. */
export async function probeReplica(instance: InstanceRecord, jobId: string, port: number, probe: ProbeSettings, secrets: ProbeSecrets): Promise<ProbeResult> {
  const probeOwnHeaders = await probeHeaders(probe, secrets);
  if (typeof probeOwnHeaders === 'string') return { ok: false, reason: `${probe.method} ${probe.url}: ${probeOwnHeaders}` };
  const access = new AgentClient(instance.agentUrl!, instance.agentToken).portAccess(jobId, port, probe.url);
  const headers: Record<string, string> = { ...access.headers };
  for (const { name, value } of probeOwnHeaders) headers[name] = value;
  let status: number;
  let text: string;
  let answerHeaders: IncomingHttpHeaders;
  try {
    // undici's request rather than fetch, as the agent client (agent/client.ts); it follows no redirect either.
    const response = await request(access.url, {
      method: probe.method as Dispatcher.HttpMethod, headers, body: probe.body, signal: AbortSignal.timeout(probe.timeoutMs),
    });
    ({ statusCode: status, headers: answerHeaders } = response);
    text = await response.body.text().catch(() => '');
  } catch (error) {
    const reason = (error as Error).name === 'TimeoutError' ? `no answer within ${probe.timeoutMs / 1000}s` : (error as Error).message;
    return { ok: false, reason: `${probe.method} ${probe.url}: ${reason}` };
  }
  const agentError = forwardError(status, answerHeaders, text);
  if (agentError) return { ok: false, reason: `${probe.method} ${probe.url}: ${agentError}` };
  if (probe.anyAnswer || (status >= 200 && status < 300)) return { ok: true };
  return { ok: false, reason: `${probe.method} ${probe.url} answered ${status}` };
}

function forwardError(status: number, headers: IncomingHttpHeaders, text: string): string | null {
  if (![404, 409, 502, 504].includes(status) || !headers['content-type']?.includes('json')) return null;
  try {
    const body = JSON.parse(text) as { error?: { code?: string; message?: string } };
    return body.error?.code && AGENT_FORWARD_ERRORS.has(body.error.code) ? body.error.message ?? body.error.code : null;
  } catch {
    return null;
  }
}
