import { expect } from 'chai';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseAllDocuments } from 'yaml';
import { loadServerConfig } from '../server/config.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const MANIFESTS = join(ROOT, 'manifests');
const DOCKERFILE = join(ROOT, 'docker', 'server', 'Dockerfile');
/** The folders whose code runs inside `orchestrator server`. */
const SERVER_PROCESS_FOLDERS = ['server', 'controllers', 'store', 'gateway', 'backends'];

interface Labels { [key: string]: string }
interface EnvVar { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } }
interface VolumeMount { name: string; mountPath: string; subPath?: string; readOnly?: boolean }
interface Probe { tcpSocket?: { port: string | number } }
interface Container {
  name: string;
  image: string;
  args?: string[];
  ports: { name?: string; containerPort: number }[];
  env: EnvVar[];
  volumeMounts: VolumeMount[];
  startupProbe?: Probe;
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  resources?: { requests?: Labels; limits?: Labels };
  securityContext?: { readOnlyRootFilesystem?: boolean; allowPrivilegeEscalation?: boolean };
}
interface Volume { name: string; emptyDir?: object; secret?: { secretName: string; items?: { key: string; path: string }[] } }
interface PodSpec {
  serviceAccountName?: string;
  automountServiceAccountToken?: boolean;
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number; fsGroup?: number };
  affinity?: { podAntiAffinity?: { preferredDuringSchedulingIgnoredDuringExecution?: { podAffinityTerm: { labelSelector: { matchLabels: Labels } } }[] } };
  containers: Container[];
  volumes: Volume[];
}
interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Labels };
  [field: string]: unknown;
}
interface Deployment extends Manifest {
  spec: { replicas: number; selector: { matchLabels: Labels }; template: { metadata: { labels: Labels }; spec: PodSpec } };
}
interface Service extends Manifest { spec: { type: string; selector: Labels; ports: { port: number; targetPort: string | number }[] } }
interface Secret extends Manifest { stringData: Record<string, string> }
interface Kustomization { resources: string[] }

/** Parsed as YAML 1.1, the version kubectl reads, so that octal numbers and `yes`/`no` mean here what they mean there. */
function parseManifestFile(file: string): unknown[] {
  const documents = parseAllDocuments(readFileSync(join(MANIFESTS, file), 'utf8'), { version: '1.1' });
  const list = Array.isArray(documents) ? documents : [documents];
  for (const document of list) {
    expect(document.errors.map((e) => e.message), `${file} does not parse`).to.deep.equal([]);
  }
  return list.map((document) => document.toJS());
}

const manifestFiles = readdirSync(MANIFESTS).filter((name) => name.endsWith('.yaml') && name !== 'kustomization.yaml').sort();
const byFile = new Map(manifestFiles.map((file) => [file, parseManifestFile(file) as Manifest[]]));
const only = <T extends Manifest>(file: string): T => {
  const documents = byFile.get(file);
  expect(documents, `${file} is missing`).to.have.length(1);
  return documents![0] as T;
};
const deployment = only<Deployment>('deployment.yaml');
const service = only<Service>('service.yaml');
const secret = only<Secret>('secret.yaml');
const namespace = only<Manifest>('namespace.yaml');
const serviceAccount = only<Manifest>('service-account.yaml');
const binding = only<Manifest & { roleRef: { kind: string; name: string }; subjects: { kind: string; name: string; namespace: string }[] }>('cluster-role-binding.yaml');
const clusterRole = only<Manifest>('cluster-role.yaml');
const pod = deployment.spec.template.spec;
const container = pod.containers[0];
const envValue = (name: string) => container.env.find((e) => e.name === name)?.value;

function sourceFiles(folder: string): string[] {
  return readdirSync(folder, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.ts'))
    .map((name) => join(folder, name))
    .filter((path) => statSync(path).isFile());
}

/** The environment variables read (`process.env.NAME` or `process.env['NAME']`) by the .ts files under the given folders. */
function variablesReadIn(folders: string[]): Set<string> {
  const names = new Set<string>();
  const present = folders.map((folder) => join(ROOT, folder)).filter((path) => existsSync(path));
  for (const file of present.flatMap(sourceFiles)) {
    for (const match of readFileSync(file, 'utf8').matchAll(/process\.env(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*['"]([A-Za-z_][A-Za-z0-9_]*)['"]\s*\])/g)) {
      names.add(match[1] ?? match[2]);
    }
  }
  return names;
}

const isSubsetOf = (subset: Labels, of: Labels) => Object.entries(subset).every(([key, value]) => of[key] === value);

describe('kubernetes manifests', () => {
  it('are one object of the expected kind and apiVersion per file', () => {
    const kinds = Object.fromEntries([...byFile].map(([file, documents]) => [file, documents.map((d) => `${d.apiVersion} ${d.kind}`)]));
    expect(kinds).to.deep.equal({
      'cluster-role-binding.yaml': ['rbac.authorization.k8s.io/v1 ClusterRoleBinding'],
      'cluster-role.yaml': ['rbac.authorization.k8s.io/v1 ClusterRole'],
      'deployment.yaml': ['apps/v1 Deployment'],
      'namespace.yaml': ['v1 Namespace'],
      'service-account.yaml': ['v1 ServiceAccount'],
      'secret.yaml': ['v1 Secret'],
      'service.yaml': ['v1 Service'],
    });
  });

  it('run the server as a service account bound to the cluster role that lets it apply the custom resources', () => {
    expect(pod.serviceAccountName).to.equal(serviceAccount.metadata.name);
    expect(pod.automountServiceAccountToken).to.equal(true);
    expect(binding.roleRef).to.deep.include({ kind: 'ClusterRole', name: clusterRole.metadata.name });
    expect(binding.subjects).to.deep.equal([{ kind: 'ServiceAccount', name: serviceAccount.metadata.name, namespace: namespace.metadata.name }]);
  });

  it('put every namespaced object in the namespace they create', () => {
    for (const object of [deployment, service, secret, serviceAccount]) {
      expect(object.metadata.namespace, `${object.kind} ${object.metadata.name}`).to.equal(namespace.metadata.name);
    }
  });

  it('are all listed in the kustomization, which loads nothing from outside manifests/', () => {
    const kustomization = parseAllDocuments(readFileSync(join(MANIFESTS, 'kustomization.yaml'), 'utf8'), { version: '1.1' });
    const [document] = Array.isArray(kustomization) ? kustomization : [kustomization];
    const { resources } = document.toJS() as Kustomization;
    expect([...resources].sort()).to.deep.equal(manifestFiles);
    // `kubectl apply -k` refuses files outside the kustomization's folder (its load restrictor has no switch there).
    const outside = resources.filter((entry) => relative(MANIFESTS, resolve(MANIFESTS, entry)).startsWith('..'));
    expect(outside).to.deep.equal([]);
  });

  describe('the server Deployment', () => {
    it('sets every ORCHESTRATOR_ variable server/ reads, and only variables the server process reads', () => {
      const set = container.env.map((e) => e.name).sort();
      const readByServer = [...variablesReadIn(['server'])].filter((name) => name.startsWith('ORCHESTRATOR_')).sort();
      expect(readByServer, 'the server reads its settings from these').to.include.members([
        'ORCHESTRATOR_DATABASE_URL', 'ORCHESTRATOR_SERVER_ADMIN_TOKEN', 'ORCHESTRATOR_SERVER_DIR',
      ]);
      expect(set).to.deep.equal(readByServer);
      const readByProcess = variablesReadIn(SERVER_PROCESS_FOLDERS);
      expect(set.filter((name) => !readByProcess.has(name)), 'set but read by nothing').to.deep.equal([]);
    });

    it('takes the database URL and admin token from keys the Secret has', () => {
      const fromSecret = container.env.filter((e) => e.valueFrom?.secretKeyRef).map((e) => [e.name, e.valueFrom!.secretKeyRef!]);
      expect(fromSecret.map(([name]) => name)).to.have.members(['ORCHESTRATOR_DATABASE_URL', 'ORCHESTRATOR_SERVER_ADMIN_TOKEN']);
      for (const [, ref] of fromSecret as [string, { name: string; key: string }][]) {
        expect(ref.name).to.equal(secret.metadata.name);
        expect(secret.stringData).to.have.property(ref.key);
      }
    });

    it('gives the server a writable server dir with config.yml from the Secret at <dir>/config.yml', () => {
      const dir = envValue('ORCHESTRATOR_SERVER_DIR');
      expect(dir).to.be.a('string');
      const dirMount = container.volumeMounts.find((m) => m.mountPath === dir);
      expect(dirMount, `a volume mounted at ${dir}`).to.not.equal(undefined);
      expect(dirMount!.readOnly ?? false).to.equal(false);
      expect(pod.volumes.find((v) => v.name === dirMount!.name)?.emptyDir, 'the server dir is an emptyDir').to.not.equal(undefined);

      const configMount = container.volumeMounts.find((m) => m.mountPath === `${dir}/config.yml`);
      expect(configMount, `a file mounted at ${dir}/config.yml`).to.not.equal(undefined);
      const configVolume = pod.volumes.find((v) => v.name === configMount!.name)!;
      expect(configVolume.secret?.secretName).to.equal(secret.metadata.name);
      const item = configVolume.secret!.items!.find((i) => i.path === configMount!.subPath);
      expect(item?.key).to.equal('config.yml');
      expect(secret.stringData).to.have.property(item!.key);
    });

    it('runs as a non-root user on a read-only root filesystem', () => {
      expect(pod.securityContext?.runAsNonRoot).to.equal(true);
      expect(pod.securityContext?.runAsUser).to.be.above(0);
      expect(container.securityContext?.readOnlyRootFilesystem).to.equal(true);
      expect(container.securityContext?.allowPrivilegeEscalation).to.equal(false);
      expect(container.resources?.requests).to.include.keys('cpu', 'memory');
      expect(container.resources?.limits).to.include.keys('memory');
    });

    it('runs more than one replica, whose pods its selector and anti-affinity pick', () => {
      expect(deployment.spec.replicas).to.be.at.least(2);
      const podLabels = deployment.spec.template.metadata.labels;
      expect(isSubsetOf(deployment.spec.selector.matchLabels, podLabels)).to.equal(true);
      for (const term of pod.affinity?.podAntiAffinity?.preferredDuringSchedulingIgnoredDuringExecution ?? []) {
        expect(isSubsetOf(term.podAffinityTerm.labelSelector.matchLabels, podLabels)).to.equal(true);
      }
    });

    it('listens on all addresses of the container port that its probes check', () => {
      const args = container.args ?? [];
      expect(args[0]).to.equal('server');
      expect(args[args.indexOf('--host') + 1]).to.equal('0.0.0.0');
      const port = Number(args[args.indexOf('--port') + 1]);
      const declared = container.ports.find((p) => p.containerPort === port);
      expect(declared, `container port ${port}`).to.not.equal(undefined);
      for (const probe of [container.startupProbe, container.readinessProbe, container.livenessProbe]) {
        expect([declared!.name, declared!.containerPort]).to.include(probe?.tcpSocket?.port);
      }
    });

    it('runs the image tagged with this version', () => {
      const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
      expect(container.image).to.equal(`orchestrator/server:${version}`);
    });
  });

  describe('the Secret', () => {
    it('holds a config.yml the server accepts, with project main on gpucloud only', () => {
      const dir = mkdtempSync(join(tmpdir(), 'orchestrator-manifests-'));
      try {
        const path = join(dir, 'config.yml');
        writeFileSync(path, secret.stringData['config.yml']);
        const config = loadServerConfig(path);
        expect(config.projects.map((p) => p.name)).to.deep.equal(['main']);
        // A pod has no engine for the local backend, and each replica would see its own "local machine".
        expect(config.projects[0].backends.map((b) => b.type)).to.deep.equal(['gpucloud']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('marks every credential as a placeholder to replace', () => {
      const config = secret.stringData['config.yml'];
      expect(/api_key: .*REPLACE/.test(config), 'the gpucloud api_key').to.equal(true);
      expect(secret.stringData.ORCHESTRATOR_DATABASE_URL).to.contain('REPLACE');
      expect(secret.stringData.ORCHESTRATOR_SERVER_ADMIN_TOKEN).to.contain('REPLACE');
      expect(secret.stringData.ORCHESTRATOR_SERVER_ADMIN_TOKEN, 'a bearer token has no spaces, so this one never signs in')
        .to.match(/\s/);
    });
  });

  describe('the Service', () => {
    it('is a ClusterIP that selects the server pods and targets the container port', () => {
      expect(service.spec.type).to.equal('ClusterIP');
      expect(isSubsetOf(service.spec.selector, deployment.spec.template.metadata.labels)).to.equal(true);
      for (const port of service.spec.ports) {
        const target = container.ports.find((p) => p.name === port.targetPort || p.containerPort === port.targetPort);
        expect(target, `target port ${port.targetPort}`).to.not.equal(undefined);
        expect(port.port).to.equal(3000);
      }
    });
  });

  describe('the server image', () => {
    const dockerfile = readFileSync(DOCKERFILE, 'utf8');
    const instruction = (name: string) => [...dockerfile.matchAll(new RegExp(`^${name}\\s+(.+)$`, 'gm'))].map((m) => m[1]);

    it('starts the built CLI as the user and with the server dir the Deployment expects', () => {
      const { bin } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { bin: { orchestrator: string } };
      expect(JSON.parse(instruction('ENTRYPOINT').at(-1)!)).to.deep.equal(['node', bin.orchestrator]);
      expect(JSON.parse(instruction('CMD').at(-1)!)).to.deep.equal(container.args);
      expect(instruction('USER').at(-1)).to.equal(`${pod.securityContext!.runAsUser}:${pod.securityContext!.runAsUser}`);
      expect(dockerfile).to.match(new RegExp(`ORCHESTRATOR_SERVER_DIR=${envValue('ORCHESTRATOR_SERVER_DIR')}\\s`));
    });

    it('builds from a context that lets in what tsc compiles and keeps node_modules out', () => {
      const patterns = readFileSync(`${DOCKERFILE}.dockerignore`, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));
      expect(patterns[0], 'everything is excluded first').to.equal('*');
      const allowed = patterns.filter((p) => p.startsWith('!')).map((p) => p.slice(1));
      const { include } = JSON.parse(readFileSync(join(ROOT, 'tsconfig.json'), 'utf8')) as { include: string[] };
      expect(allowed).to.include.members(['package.json', 'package-lock.json', 'tsconfig.json', ...include]);
      const lastAllowed = patterns.map((p) => p.startsWith('!')).lastIndexOf(true);
      expect(patterns.slice(lastAllowed), 'node_modules excluded again inside the allowed folders').to.include('**/node_modules');
      expect(instruction('COPY')).to.include('. .');
    });
  });
});
