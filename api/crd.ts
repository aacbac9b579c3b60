import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { stringify } from 'yaml';
import { ResourceStatus } from './kubernetes.js';
import { MAX_NAME_LENGTH, NAME_PATTERN } from './names.js';
import { SPEC_SCHEMAS, SPEC_TYPES, type SpecType } from './spec.js';

export const CRD_GROUP = 'orchestrator.dev';
export const CRD_VERSION = 'v1alpha1';
export const CRD_REGENERATE_COMMAND = 'node --import tsx api/crd.ts';

export const CRD_NAMES: Record<SpecType, { kind: string; plural: string; singular: string }> = {
  'fleet': { kind: 'Fleet', plural: 'fleets', singular: 'fleet' },
  'task': { kind: 'Task', plural: 'tasks', singular: 'task' },
  'service': { kind: 'Service', plural: 'services', singular: 'service' },
  'dev-environment': { kind: 'DevEnvironment', plural: 'devenvironments', singular: 'devenvironment' },
};

type Json = { [key: string]: unknown };

const COPIED_KEYWORDS = ['description', 'default', 'minLength', 'maxLength', 'pattern', 'minimum', 'maximum', 'minItems', 'maxItems'];

function copyKeywords(from: Json, to: Json): Json {
  for (const keyword of COPIED_KEYWORDS) {
    if (from[keyword] !== undefined) to[keyword] = from[keyword];
  }
  return to;
}

function scalarTypeOf(schema: Json): string | undefined {
  return typeof schema.type === 'string' && ['string', 'integer', 'number', 'boolean'].includes(schema.type) ? schema.type : undefined;
}

/**
 * A Kubernetes structural schema for a TypeBox schema: every node typed, no `$ref` and no `anyOf`.
 * A union of literals becomes an enum, a string-or-number union `x-kubernetes-int-or-string`, and any
 * other union (a string or a map, say) keeps its value as written, with the forms in its description;
 * the server validates those fields in full.
 */
export function toStructural(schema: Json): Json {
  const out: Json = {};
  if (typeof schema.description === 'string') out.description = schema.description;
  if (schema.default !== undefined) out.default = schema.default;
  if (Array.isArray(schema.anyOf)) {
    const branches = schema.anyOf as Json[];
    if (branches.every((branch) => 'const' in branch)) return { type: typeof branches[0].const, enum: branches.map((b) => b.const), ...out };
    const types = new Set(branches.map(scalarTypeOf));
    if (types.has('string') && [...types].every((type) => type === 'string' || type === 'integer' || type === 'number')) {
      return { 'x-kubernetes-int-or-string': true, ...out };
    }
    return { 'x-kubernetes-preserve-unknown-fields': true, ...out };
  }
  if ('const' in schema) return { type: typeof schema.const, enum: [schema.const], ...out };
  const result: Json = copyKeywords(schema, { type: schema.type });
  switch (schema.type) {
    case 'object': {
      const properties = schema.properties as Record<string, Json> | undefined;
      if (!properties) {
        result.additionalProperties = toStructural(Object.values(schema.patternProperties as Record<string, Json>)[0]);
        break;
      }
      result.properties = Object.fromEntries(Object.entries(properties).map(([key, value]) => [key, toStructural(value)]));
      if (Array.isArray(schema.required) && schema.required.length > 0) result.required = schema.required;
      break;
    }
    case 'array': {
      const items = schema.items as Json;
      result.items = toStructural(items);
      if (schema.uniqueItems === true) result['x-kubernetes-list-type'] = 'set';
      break;
    }
    case 'integer':
    case 'number':
      if (typeof schema.exclusiveMinimum === 'number') {
        result.minimum = schema.exclusiveMinimum;
        result.exclusiveMinimum = true;
      }
      break;
  }
  return result;
}

/** The kind's schema without `type` and `name`, which a Kubernetes object carries as its kind and metadata.name. */
function specSchema(type: SpecType): Json {
  const schema = SPEC_SCHEMAS[type] as unknown as Json;
  const properties = { ...(schema.properties as Record<string, Json>) };
  delete properties.type;
  delete properties.name;
  const required = ((schema.required as string[] | undefined) ?? []).filter((key) => key !== 'type' && key !== 'name');
  return toStructural({ ...schema, properties, required });
}

const STATUS_COLUMN = { name: 'Status', type: 'string', jsonPath: '.status.status' };
const GPU_COLUMN = { name: 'GPU', type: 'string', jsonPath: '.status.gpu' };
const INSTANCE_COLUMN = { name: 'Instance', type: 'string', jsonPath: '.status.instance', priority: 1 };
const MESSAGE_COLUMN = { name: 'Message', type: 'string', jsonPath: '.status.statusMessage', priority: 1 };

/** What `kubectl get` shows of each kind; priority 1 columns only with `-o wide`. */
const PRINTER_COLUMNS: Record<SpecType, Json[]> = {
  'fleet': [STATUS_COLUMN, { name: 'Instances', type: 'integer', jsonPath: '.status.instances' }, MESSAGE_COLUMN],
  'task': [STATUS_COLUMN, GPU_COLUMN, { name: 'Exit', type: 'integer', jsonPath: '.status.exitCode' }, INSTANCE_COLUMN, MESSAGE_COLUMN],
  'service': [STATUS_COLUMN, GPU_COLUMN, { name: 'URL', type: 'string', jsonPath: '.status.serviceUrl' }, INSTANCE_COLUMN, MESSAGE_COLUMN],
  'dev-environment': [STATUS_COLUMN, GPU_COLUMN, INSTANCE_COLUMN, MESSAGE_COLUMN],
};

/**
 * The status of an object no server has written to yet (the API server fills it in on every read, objects stored
 * before this default included): generation 0 observed, so that kstatus, Flux and Argo CD read it as in progress
 * rather than as an object without status, which kstatus counts as current.
 */
const UNOBSERVED_STATUS: ResourceStatus = { observedGeneration: 0, conditions: [] };

function crdFor(type: SpecType): Json {
  const names = CRD_NAMES[type];
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `${names.plural}.${CRD_GROUP}` },
    spec: {
      group: CRD_GROUP,
      names: { kind: names.kind, listKind: `${names.kind}List`, plural: names.plural, singular: names.singular, categories: ['orchestrator'] },
      scope: 'Namespaced',
      versions: [{
        name: CRD_VERSION,
        served: true,
        storage: true,
        subresources: { status: {} },
        additionalPrinterColumns: [
          ...PRINTER_COLUMNS[type],
          { name: 'Ready', type: 'string', jsonPath: '.status.conditions[?(@.type=="Ready")].status' },
          { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
        ],
        schema: {
          openAPIV3Schema: {
            type: 'object',
            description: (SPEC_SCHEMAS[type] as unknown as Json).description,
            required: ['spec'],
            properties: {
              apiVersion: { type: 'string' },
              kind: { type: 'string' },
              metadata: { type: 'object' },
              spec: specSchema(type),
              status: { ...toStructural(ResourceStatus as unknown as Json), description: 'Written by the orchestrator', default: UNOBSERVED_STATUS },
            },
            'x-kubernetes-validations': [{
              rule: `self.metadata.name.size() <= ${MAX_NAME_LENGTH} && self.metadata.name.matches('${NAME_PATTERN}')`,
              message: `metadata.name must be 1-${MAX_NAME_LENGTH} lowercase letters, digits and hyphens, starting with a letter`,
            }],
          },
        },
      }],
    },
  };
}

/** One CustomResourceDefinition per kind, as file name → YAML text. */
export function generateCrds(): Record<string, string> {
  const header = `# Generated from api/spec.ts by \`${CRD_REGENERATE_COMMAND}\`; do not edit.\n`;
  return Object.fromEntries(SPEC_TYPES.map((type) => [
    `${CRD_NAMES[type].plural}.${CRD_GROUP}.yaml`,
    header + stringify(crdFor(type), { lineWidth: 0 }),
  ]));
}

function repositoryRoot(): string {
  let directory = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(directory, 'package.json'))) {
    const parent = dirname(directory);
    if (parent === directory) throw new Error('cannot find the repository root (no package.json above api/crd.ts)');
    directory = parent;
  }
  return directory;
}

export function writeCrds(directory = join(repositoryRoot(), 'crds')): string[] {
  const files = generateCrds();
  mkdirSync(directory, { recursive: true });
  for (const stale of readdirSync(directory).filter((name) => name.endsWith('.yaml') && !(name in files))) {
    rmSync(join(directory, stale));
  }
  for (const [name, text] of Object.entries(files)) writeFileSync(join(directory, name), text);
  return Object.keys(files).map((name) => join(directory, name));
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  for (const file of writeCrds()) console.log(`wrote ${file}`);
}
