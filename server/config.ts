import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { LineCounter, parseDocument, type Document } from 'yaml';
import { Budget, budgetProblems } from '../api/costs.js';
import { parseDuration } from '../api/duration.js';
import { parseSize } from '../api/quantity.js';
import { BackendConfig, GpucloudBackendConfig, KubernetesBackendConfig, LocalBackendConfig } from '../backends/config.js';

const LogsConfig = Type.Object({
  /** The most log text one run keeps in the database; past it the oldest lines are dropped. */
  max_size_per_run: Type.Optional(Type.Union([Type.String(), Type.Number()], { description: 'e.g. 100MB or 1GB' })),
}, { additionalProperties: false });

const MetricsConfig = Type.Object({
  /** Serve GET /metrics without a token (for a Prometheus inside a trusted network); otherwise it needs a global admin's. */
  public: Type.Optional(Type.Boolean()),
}, { additionalProperties: false });

const SecretsConfig = Type.Object({
  /** 32 bytes in base64 that encrypt the projects' secrets; without it the server keeps its own in its folder. */
  key: Type.Optional(Type.String()),
}, { additionalProperties: false });

const KubernetesConfig = Type.Object({
  /** A kubeconfig file; without it, $KUBECONFIG, ~/.kube/config, or the service account of the pod the server runs in. */
  kubeconfig: Type.Optional(Type.String({ minLength: 1 })),
  /** Apply the custom resources (Fleet, Task, Service, DevEnvironment) found in these namespaces. */
  watch: Type.Object({
    /** Every namespace when left out. */
    namespaces: Type.Optional(Type.Array(Type.String({ pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', maxLength: 63 }), { minItems: 1 })),
    /** The project of a namespace without the orchestrator.dev/project label or annotation; the first project when left out. */
    project: Type.Optional(Type.String()),
  }, { additionalProperties: false }),
}, { additionalProperties: false });
export type KubernetesConfig = Static<typeof KubernetesConfig>;

/** The address this server is reached at from elsewhere: the instances that run gateways, links in custom resources. */
const ServerUrl = Type.String({ minLength: 1, description: 'e.g. https://orchestrator.example.com' });

export const ServerConfig = Type.Object({
  server_url: Type.Optional(ServerUrl),
  projects: Type.Array(Type.Object({
    name: Type.String({ pattern: '^[a-z][-a-z0-9]{0,39}$' }),
    backends: Type.Array(BackendConfig),
    /** What the project may spend per calendar period, and what happens once it has (docs/costs.md). */
    budget: Type.Optional(Budget),
  }, { additionalProperties: false }), { minItems: 1 }),
  logs: Type.Optional(LogsConfig),
  metrics: Type.Optional(MetricsConfig),
  secrets: Type.Optional(SecretsConfig),
  kubernetes: Type.Optional(KubernetesConfig),
}, { additionalProperties: false });
export type ServerConfig = Static<typeof ServerConfig>;

export const DEFAULT_CONFIG = `# The orchestrator server's configuration. Restart the server after editing it.
# The address other machines reach this server at: gateways on rented instances call it there, and the
# custom resources' status links there. Without it, the address the server listens on.
# server_url: https://orchestrator.example.com
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
  # What the project may spend per calendar period (UTC), and what happens once it has (docs/costs.md).
  # budget:
  #   amount: 500
  #   period: month
  #   on_exceed: stop_new
# Past this much log text a run's oldest lines are dropped (\`orchestrator logs\` says how many).
# logs:
#   max_size_per_run: 100MB
# GET /metrics (Prometheus) needs a global admin's token unless it is public.
# metrics:
#   public: true
# Project secrets are encrypted with the key in this folder's secrets-key file; servers that share a
# database need the same key: give it here (openssl rand -base64 32) on each of them.
# secrets:
#   key: <32 bytes in base64>
# Apply the orchestrator.dev custom resources of these namespaces (all when left out) from a Kubernetes
# cluster: the kubeconfig named, else $KUBECONFIG, ~/.kube/config or the pod's service account.
# kubernetes:
#   kubeconfig: /path/to/kubeconfig
#   watch:
#     namespaces: [ml-team]
#     project: main
`;

/** More alias expansions than a hand-written config needs; beyond it a file is taken for an attack. */
const MAX_ALIAS_EXPANSIONS = 100;

export const DEFAULT_MAX_LOG_SIZE_PER_RUN = '100MB';

/** Bytes of log text one run may keep. */
export function maxLogBytesPerRun(config: ServerConfig): number {
  return parseSize(config.logs?.max_size_per_run ?? DEFAULT_MAX_LOG_SIZE_PER_RUN) * 1024 * 1024;
}

function isServerUrl(text: string): boolean {
  if (!URL.canParse(text)) return false;
  const url = new URL(text);
  return (url.protocol === 'http:' || url.protocol === 'https:') && url.username === '' && url.password === '' && url.search === '' && url.hash === '';
}

/** `server_url` without a trailing slash, or null when config.yml gives none. */
export function advertisedServerUrl(config: ServerConfig): string | null {
  return config.server_url === undefined ? null : config.server_url.replace(/\/+$/, '');
}

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
  const value = plainValue(document, path);
  const problems = configProblems(value);
  if (problems.length > 0) {
    const lines = problems.slice(0, 5).map(({ path: segments, message }) => {
      const at = positionOf(document, lineCounter, segments);
      return `${path}${at ? `:${at.line}:${at.col}` : ''}: ${fieldPath(segments) || '(top level)'}: ${message}`;
    });
    throw new ConfigError(`invalid server config:\n${lines.join('\n')}`);
  }
  return value as ServerConfig;
}

/**
 * The file as plain data. Aliases are expanded here, not while parsing, so this is where an
 * exponentially expanding file ("billion laughs") is refused, and where an alias without its anchor
 * is found.
 */
function plainValue(document: Document, path: string): unknown {
  try {
    return document.toJS({ maxAliasCount: MAX_ALIAS_EXPANSIONS });
  } catch (error) {
    const message = (error as Error).message;
    if (message.startsWith('Excessive alias count')) {
      throw new ConfigError(`${path}: too many aliases: its anchors expand beyond ${MAX_ALIAS_EXPANSIONS} copies, as in a "billion laughs" attack; write the values out instead`);
    }
    throw new ConfigError(`${path}: ${message.split('\n')[0]}`);
  }
}

const BACKEND_SCHEMAS = { gpucloud: GpucloudBackendConfig, local: LocalBackendConfig, kubernetes: KubernetesBackendConfig } as const;
const Outline = Type.Object({
  server_url: Type.Optional(ServerUrl),
  projects: Type.Array(Type.Object({ name: ServerConfig.properties.projects.items.properties.name, backends: Type.Array(Type.Unknown()), budget: Type.Optional(Type.Unknown()) },
    { additionalProperties: false }), { minItems: 1 }),
  logs: Type.Optional(LogsConfig),
  metrics: Type.Optional(MetricsConfig),
  secrets: Type.Optional(SecretsConfig),
  kubernetes: Type.Optional(KubernetesConfig),
}, { additionalProperties: false });

interface Problem {
  path: (string | number)[];
  message: string;
}

/** Every problem in the file; backends are checked by their `type`, so a message speaks of the right fields. */
function configProblems(value: unknown): Problem[] {
  const toPath = (pointer: string, prefix: (string | number)[] = []) =>
    [...prefix, ...pointer.split('/').filter(Boolean).map((s) => (/^\d+$/.test(s) ? Number(s) : s))];
  const problems: Problem[] = [];
  const add = (path: (string | number)[], message: string) => {
    if (!problems.some((p) => fieldPath(p.path) === fieldPath(path))) problems.push({ path, message: plainMessage(message) });
  };
  for (const e of Value.Errors(Outline, value)) add(toPath(e.path), e.message);
  if (problems.length > 0) return problems;
  const maxLogSize = (value as ServerConfig).logs?.max_size_per_run;
  if (maxLogSize !== undefined) {
    try {
      if (parseSize(maxLogSize) < 1) add(['logs', 'max_size_per_run'], 'expected at least 1MB');
    } catch (error) {
      add(['logs', 'max_size_per_run'], (error as Error).message);
    }
  }
  const serverUrl = (value as ServerConfig).server_url;
  if (serverUrl !== undefined && !isServerUrl(serverUrl)) {
    add(['server_url'], `expected the http:// or https:// address this server is reached at from other machines, such as https://orchestrator.example.com, got ${JSON.stringify(serverUrl)}`);
  }
  const watchedProject = (value as ServerConfig).kubernetes?.watch.project;
  const projects = (value as ServerConfig).projects.map((project) => project.name);
  if (watchedProject !== undefined && !projects.includes(watchedProject)) {
    add(['kubernetes', 'watch', 'project'], `no project ${JSON.stringify(watchedProject)} in this file; expected one of: ${projects.join(', ')}`);
  }
  (value as ServerConfig).projects.forEach((project, p) => {
    if (project.budget !== undefined) budgetProblems(project.budget).forEach(({ path: field, message }) => add(['projects', p, 'budget', ...field], message));
  });
  (value as ServerConfig).projects.forEach((project, p) => project.backends.forEach((backend, b) => {
    const at = ['projects', p, 'backends', b];
    const type = (backend as { type?: unknown })?.type;
    const schema = BACKEND_SCHEMAS[type as keyof typeof BACKEND_SCHEMAS];
    if (!schema) {
      add([...at, 'type'], `unknown backend type ${JSON.stringify(type)}; expected one of: gpucloud, local, kubernetes`);
      return;
    }
    for (const e of Value.Errors(schema, backend)) add(toPath(e.path, at), e.message);
    if (type === 'kubernetes') kubernetesBackendProblems(backend as KubernetesBackendConfig).forEach(({ path: field, message }) => add([...at, ...field], message));
  }));
  return problems;
}

/** What the kubernetes backend's schema cannot say: a duration that does not read, a kubeconfig that is not there. */
function kubernetesBackendProblems(backend: KubernetesBackendConfig): Problem[] {
  const problems: Problem[] = [];
  if (backend.unschedulable_timeout !== undefined) {
    try {
      parseDuration(backend.unschedulable_timeout);
    } catch (error) {
      problems.push({ path: ['unschedulable_timeout'], message: (error as Error).message });
    }
  }
  if (typeof backend.kubeconfig === 'string' && !existsSync(backend.kubeconfig)) {
    problems.push({ path: ['kubeconfig'], message: `no such file ${backend.kubeconfig}` });
  }
  return problems;
}

function fieldPath(segments: (string | number)[]): string {
  return segments.reduce<string>((acc, s) => (typeof s === 'number' ? `${acc}[${s}]` : acc ? `${acc}.${s}` : s), '');
}

function plainMessage(message: string): string {
  if (message === 'Expected required property') return 'missing; this field is required';
  if (message === 'Unexpected property') return 'unknown field';
  return message.charAt(0).toLowerCase() + message.slice(1);
}

/** Where the field is written, or where its nearest written parent is (a missing field has no place of its own). */
function positionOf(document: Document, lineCounter: LineCounter, segments: (string | number)[]): { line: number; col: number } | null {
  for (let length = segments.length; length >= 0; length--) {
    const node = document.getIn(segments.slice(0, length), true) as { range?: [number, number] } | undefined;
    if (node?.range) return lineCounter.linePos(node.range[0]);
  }
  return null;
}
