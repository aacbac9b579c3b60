/** A DNS name as the gateway publishes services under it: lowercase labels of letters, digits and hyphens. */
const HOSTNAME = /^(?=.{1,240}$)([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)(\.([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?))+$/;

/**
 * The name under a gateway's wildcard domain: `*.ml.example.com` → `ml.example.com`. Throws with what is wrong,
 * for the spec's error message.
 */
export function wildcardBase(domain: string): string {
  if (!domain.startsWith('*.')) throw new Error(`"${domain}" is not a wildcard domain; write it as *.example.com, services are then published at <run>.example.com`);
  const base = domain.slice(2);
  if (base !== base.toLowerCase()) throw new Error(`"${domain}" has capital letters; write the domain in lowercase`);
  if (!HOSTNAME.test(base)) throw new Error(`"${domain}" is not a domain name: after "*." expected at least two dot-separated labels of letters, digits and hyphens, such as *.ml.example.com`);
  return base;
}

/** The name under a gateway's domain that serves the OpenAI-compatible endpoint of the models it publishes, not a run. */
export const GATEWAY_MODELS_NAME = 'gateway';

/** The run a Host header names under a gateway's domain base, or null: `echo.ml.example.com:8443` → `echo`. */
export function runOfHost(host: string | undefined, base: string): string | null {
  if (!host) return null;
  const name = host.replace(/:\d+$/, '').toLowerCase().replace(/\.$/, '');
  const suffix = `.${base}`;
  if (!name.endsWith(suffix)) return null;
  const run = name.slice(0, -suffix.length);
  return run.includes('.') || run === '' ? null : run;
}
