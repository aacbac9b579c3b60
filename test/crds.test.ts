import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { CRD_GROUP, CRD_REGENERATE_COMMAND, CRD_VERSION, generateCrds } from '../api/crd.js';

const CRDS = join(dirname(fileURLToPath(import.meta.url)), '..', 'crds');

type Json = { [key: string]: unknown };

const ALLOWED_KEYWORDS = new Set([
  'type', 'description', 'default', 'enum', 'properties', 'required', 'items', 'additionalProperties',
  'minLength', 'maxLength', 'pattern', 'minimum', 'maximum', 'exclusiveMinimum', 'minItems', 'maxItems', 'format', 'nullable',
  'x-kubernetes-int-or-string', 'x-kubernetes-preserve-unknown-fields', 'x-kubernetes-list-type', 'x-kubernetes-validations',
]);
const TYPES = new Set(['object', 'array', 'string', 'integer', 'number', 'boolean']);

/** The rules of a Kubernetes structural schema, checked on every node; returns what breaks them, by path. */
function structuralViolations(node: Json, path: string): string[] {
  const problems: string[] = [];
  for (const key of Object.keys(node)) {
    if (!ALLOWED_KEYWORDS.has(key)) problems.push(`${path}: keyword ${key} is not allowed (no $ref, anyOf, oneOf, allOf, not or TypeBox extras)`);
  }
  const intOrString = node['x-kubernetes-int-or-string'] === true;
  const preserved = node['x-kubernetes-preserve-unknown-fields'] === true;
  if (intOrString && node.type !== undefined) problems.push(`${path}: x-kubernetes-int-or-string must not have a type`);
  if (!intOrString && !preserved && !TYPES.has(node.type as string)) problems.push(`${path}: has no valid type`);
  if (node.type === 'object') {
    if (node.properties !== undefined && node.additionalProperties !== undefined) problems.push(`${path}: properties and additionalProperties together`);
    if (node.properties === undefined && node.additionalProperties === undefined && !preserved && path !== '.metadata') {
      problems.push(`${path}: object with neither properties nor additionalProperties`);
    }
  }
  if (node.type === 'array' && node.items === undefined) problems.push(`${path}: array without items`);
  if (Array.isArray(node.enum)) {
    for (const value of node.enum) if (typeof value !== node.type) problems.push(`${path}: enum value ${String(value)} is not a ${String(node.type)}`);
  }
  if (Array.isArray(node.required)) {
    const properties = (node.properties ?? {}) as Json;
    for (const key of node.required as string[]) if (!(key in properties)) problems.push(`${path}: required ${key} is not a property`);
  }
  for (const [key, child] of Object.entries((node.properties ?? {}) as Record<string, Json>)) problems.push(...structuralViolations(child, `${path}.${key}`));
  if (node.items) problems.push(...structuralViolations(node.items as Json, `${path}[]`));
  if (node.additionalProperties && typeof node.additionalProperties === 'object') problems.push(...structuralViolations(node.additionalProperties as Json, `${path}{}`));
  return problems;
}

describe('crds', () => {
  const generated = generateCrds();

  it('are up to date with api/spec.ts', () => {
    const onDisk = Object.fromEntries(readdirSync(CRDS).filter((name) => name.endsWith('.yaml')).map((name) => [name, readFileSync(join(CRDS, name), 'utf8')]));
    const stale = Object.keys({ ...generated, ...onDisk }).filter((name) => generated[name] !== onDisk[name]);
    expect(stale, `crds/ is stale; regenerate it with \`${CRD_REGENERATE_COMMAND}\``).to.deep.equal([]);
  });

  it('define one resource per kind in the orchestrator group', () => {
    const kinds = Object.values(generated).map((text) => {
      const crd = parse(text);
      expect(crd.spec.group).to.equal(CRD_GROUP);
      expect(crd.spec.versions.map((v: Json) => v.name)).to.deep.equal([CRD_VERSION]);
      expect(crd.metadata.name).to.equal(`${crd.spec.names.plural}.${CRD_GROUP}`);
      return crd.spec.names.kind;
    });
    expect(kinds.sort()).to.deep.equal(['DevEnvironment', 'Fleet', 'Service', 'Task']);
  });

  for (const [file, text] of Object.entries(generated)) {
    it(`${file} has a structural schema`, () => {
      const root = parse(text).spec.versions[0].schema.openAPIV3Schema as Json;
      expect(structuralViolations(root, '')).to.deep.equal([]);
    });
  }

  it('carry the fields of each kind, with the forms of union fields kept open and described', () => {
    const service = parse(generated[`services.${CRD_GROUP}.yaml`]).spec.versions[0].schema.openAPIV3Schema.properties.spec;
    expect(service.required).to.deep.equal(['port']);
    expect(service.properties.port).to.deep.include({ type: 'integer', minimum: 1, maximum: 65535 });
    // A number, a range or a list of replica groups: no structural type holds all three, so the server checks it.
    expect(service.properties.replicas).to.deep.include({ 'x-kubernetes-preserve-unknown-fields': true, default: 1 });
    expect(service.properties.model).to.deep.include({ 'x-kubernetes-preserve-unknown-fields': true });
    expect(service.properties.model.description).to.be.a('string');
    expect(service.properties.probes.items.properties.method).to.deep.include({ type: 'string', enum: ['get', 'post', 'put', 'delete', 'patch', 'head'] });
    expect(service.properties.scaling.properties.target).to.deep.include({ type: 'number', minimum: 0, exclusiveMinimum: true });
    expect(service.properties).not.to.have.any.keys('type', 'name');
    const fleet = parse(generated[`fleets.${CRD_GROUP}.yaml`]).spec.versions[0].schema.openAPIV3Schema.properties.spec;
    expect(fleet.properties.backends).to.deep.include({ type: 'array', 'x-kubernetes-list-type': 'set', items: { type: 'string', enum: ['gpucloud', 'local', 'kubernetes', 'ssh'] } });
    expect(fleet.properties.ssh_config.properties.hosts).to.deep.include({ type: 'array' });
    expect(fleet.properties.idle_duration).to.deep.include({ 'x-kubernetes-int-or-string': true, default: '5m' });
  });

  it('catch a schema that breaks the structural rules', () => {
    expect(structuralViolations({ anyOf: [{ type: 'string' }, { type: 'object' }] }, '')).to.deep.equal([
      ': keyword anyOf is not allowed (no $ref, anyOf, oneOf, allOf, not or TypeBox extras)', ': has no valid type',
    ]);
  });
});
