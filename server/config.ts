import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { LineCounter, parseDocument } from 'yaml';
import { BackendConfig, GpucloudBackendConfig, LocalBackendConfig } from '../backends/config.js';

export const ServerConfig = Type.Object({
  projects: Type.Array(Type.Object({
    name: Type.String({ pattern: '^[a-z][-a-z0-9]{0,39}$' }),
    backends: Type.Array(BackendConfig),
  }, { additionalProperties: false }), { minItems: 1 }),
}, { additionalProperties: false });
export type ServerConfig = Static<typeof ServerConfig>;

export const DEFAULT_CONFIG = `# The orchestrator server's configuration. Restart the server after editing it.
projects:
- name: main
  backends:
  - type: local
  # Rented GPUs from gpucloud; \`orchestrator gpucloud-emulator\` prints an entry to try it locally.
  # - type: gpucloud
  #   api_url: http://127.0.0.1:8090/v1
  #   creds:
  #     type: api_key
  #     api_key: <your gpucloud API key>
`;

/** A reason the server cannot start that the user can fix; shown without a stack trace. */
export class StartupError extends Error {}
export class ConfigError extends StartupError {}

/** Reads config.yml, writing the default one first when there is none; an invalid file names the field. */
export function loadServerConfig(path: string): ServerConfig {
  if (!existsSync(path)) {
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, DEFAULT_CONFIG, { mode: 0o600 });
  }
  const text = readFileSync(path, 'utf8');
  const lineCounter = new LineCounter();
  const document = parseDocument(text, { lineCounter });
  if (document.errors.length > 0) {
    const e = document.errors[0];
    throw new ConfigError(`${path}:${e.linePos?.[0].line ?? '?'}:${e.linePos?.[0].col ?? '?'}: ${e.message.split('\n')[0]}`);
  }
  const value = document.toJS();
  const problems = configProblems(value);
  if (problems.length > 0) {
    const lines = problems.slice(0, 5).map(({ path: segments, message }) => {
      const node = document.getIn(segments, true) as { range?: [number, number] } | undefined;
      const at = node?.range ? lineCounter.linePos(node.range[0]) : null;
      return `${path}${at ? `:${at.line}:${at.col}` : ''}: ${fieldPath(segments) || '(top level)'}: ${message}`;
    });
    throw new ConfigError(`invalid server config:\n${lines.join('\n')}`);
  }
  return value as ServerConfig;
}

const BACKEND_SCHEMAS = { gpucloud: GpucloudBackendConfig, local: LocalBackendConfig } as const;
const Outline = Type.Object({
  projects: Type.Array(Type.Object({ name: ServerConfig.properties.projects.items.properties.name, backends: Type.Array(Type.Unknown()) },
    { additionalProperties: false }), { minItems: 1 }),
}, { additionalProperties: false });

interface Problem {
  path: (string | number)[];
  message: string;
}

/** Every problem in the file; backends are checked by their `type`, so a message speaks of the right fields. */
function configProblems(value: unknown): Problem[] {
  const toPath = (pointer: string, prefix: (string | number)[] = []) =>
    [...prefix, ...pointer.split('/').filter(Boolean).map((s) => (/^\d+$/.test(s) ? Number(s) : s))];
  const problems: Problem[] = [...Value.Errors(Outline, value)].map((e) => ({ path: toPath(e.path), message: e.message }));
  if (problems.length > 0) return problems;
  (value as ServerConfig).projects.forEach((project, p) => project.backends.forEach((backend, b) => {
    const at = ['projects', p, 'backends', b];
    const type = (backend as { type?: unknown })?.type;
    const schema = BACKEND_SCHEMAS[type as keyof typeof BACKEND_SCHEMAS];
    if (!schema) {
      problems.push({ path: [...at, 'type'], message: `unknown backend type ${JSON.stringify(type)}; expected one of: gpucloud, local` });
      return;
    }
    for (const e of Value.Errors(schema, backend)) problems.push({ path: toPath(e.path, at), message: e.message });
  }));
  return problems;
}

function fieldPath(segments: (string | number)[]): string {
  return segments.reduce<string>((acc, s) => (typeof s === 'number' ? `${acc}[${s}]` : acc ? `${acc}.${s}` : s), '');
}
