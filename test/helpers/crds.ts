import { ApiextensionsV1Api, loadYaml, type KubeConfig, type V1CustomResourceDefinition } from '@kubernetes/client-node';
import { expect } from 'chai';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { eventually } from './server.js';

const CRDS = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'crds');

/** Creates the CRDs of crds/ and waits until the API server has established each one, as structural schemas. */
export async function installCrds(kubeConfig: KubeConfig): Promise<void> {
  const extensions = kubeConfig.makeApiClient(ApiextensionsV1Api);
  const files = readdirSync(CRDS).filter((name) => name.endsWith('.yaml'));
  for (const file of files) {
    // Read into the client's own model, whose fields (xKubernetesIntOrString...) it writes back out with their JSON names.
    await extensions.createCustomResourceDefinition({ body: loadYaml<V1CustomResourceDefinition>(readFileSync(join(CRDS, file), 'utf8')) });
  }
  for (const file of files) {
    const name = file.replace(/\.yaml$/, '');
    await eventually(async () => {
      const crd = await extensions.readCustomResourceDefinition({ name });
      const conditions = crd.status?.conditions ?? [];
      expect(conditions.find((c) => c.type === 'NonStructuralSchema'), `${name} is not structural`).to.equal(undefined);
      return conditions.some((c) => c.type === 'Established' && c.status === 'True');
    }, 20_000, `${name} to be established`);
  }
}
