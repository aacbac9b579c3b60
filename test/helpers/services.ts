import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Run } from '../../api/objects.js';
import { parseSpecText } from '../../api/parse.js';
import { collectFiles } from '../../cli/upload.js';

const SERVICES_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'services');

/** The example probes every 5 s; tests look every second so that readiness is seen at once. */
const FAST_PROBES = { probes: [{ type: 'http', url: '/health', interval: '1s' }] };

/** A local fleet with room for a service's replicas and a rolling update's extra one. */
export const SERVICE_FLEET = { type: 'fleet', name: 'local', backends: ['local'], nodes: '0..4', idle_duration: '10m' };

/** The echo-llm example as a spec object, with changes (undefined removes a field); its files read as the CLI sends them. */
export function echoLlm(changes: Record<string, unknown> = {}): { spec: Record<string, unknown>; files: unknown[] } {
  const path = join(SERVICES_DIR, 'echo-llm.yml');
  const { specs, errors } = parseSpecText(readFileSync(path, 'utf8'), path, {});
  expect(errors).to.deep.equal([]);
  const spec: Record<string, unknown> = { ...(specs[0] as Record<string, unknown>), ...FAST_PROBES, ...changes };
  for (const [key, value] of Object.entries(spec)) if (value === undefined) delete spec[key];
  return { spec, files: collectFiles(spec.files as string[], SERVICES_DIR) };
}

async function call(url: string, token: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${url}${path}`, {
    method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** Applies the items to project main of the server at `url`, as the user of `token`. */
export async function applyItems(url: string, token: string, ...items: Array<{ spec: unknown; files?: unknown[] }>): Promise<void> {
  const { status, body } = await call(url, token, 'POST', '/api/projects/main/apply', { items });
  expect(status, JSON.stringify(body)).to.be.oneOf([200, 201]);
}

export async function runView(url: string, token: string, name = 'echo-llm'): Promise<Run> {
  const { status, body } = await call(url, token, 'GET', `/api/projects/main/runs/${name}`);
  expect(status).to.equal(200);
  return body as Run;
}

export async function projectEvents(url: string, token: string): Promise<Array<{ reason: string; message: string }>> {
  return (await call(url, token, 'GET', '/api/projects/main/events')).body;
}

export const readyReplicas = (run: Run) => run.service!.replicas.filter((r) => r.state === 'ready');
