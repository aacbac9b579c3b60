import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const SCRIPT = readFileSync(join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'manifests', 'argocd', 'health.lua'), 'utf8');

/** A JSON value as a Lua table constructor. */
function toLua(value: unknown): string {
  if (value === null || value === undefined) return 'nil';
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  if (Array.isArray(value)) return `{${value.map(toLua).join(', ')}}`;
  return `{${Object.entries(value as Record<string, unknown>).map(([key, item]) => `[${JSON.stringify(key)}] = ${toLua(item)}`).join(', ')}}`;
}

/** What Argo CD shows for the object: manifests/argocd/health.lua run by Lua 5.1, as Argo CD runs it, with the object as `obj`. */
export function argoCdHealth(object: unknown): { status: string; message: string } {
  const program = `obj = ${toLua(object)}\nlocal function check()\n${SCRIPT}\nend\nlocal health = check()\nio.write(health.status, "\\n", health.message)`;
  const [status, ...message] = execFileSync('lua5.1', ['-'], { input: program, encoding: 'utf8' }).split('\n');
  return { status, message: message.join('\n') };
}
