import { setTimeout as sleep } from 'node:timers/promises';
import type { Backend, BackendInstance } from '../../backends/backend.js';

/** Polls `backend.get(id)` until the instance reaches `status`, failing after `timeoutMs`. */
export async function waitForStatus(backend: Backend, id: string, status: BackendInstance['status'], timeoutMs = 20_000): Promise<BackendInstance> {
  const deadline = Date.now() + timeoutMs;
  let last: BackendInstance | null = null;
  while (Date.now() < deadline) {
    last = await backend.get(id);
    if (last.status === status) return last;
    await sleep(50);
  }
  throw new Error(`instance ${id} did not become ${status} within ${timeoutMs} ms (last: ${JSON.stringify(last)})`);
}

/** GET /api/health of an agent with its token; the status and parsed body. */
export async function agentHealth(agentUrl: string, token: string): Promise<{ status: number; body: any }> {
  const response = await fetch(`${agentUrl}/api/health`, { headers: { authorization: `Bearer ${token}` } });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}
