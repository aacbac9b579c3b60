import { CoreV1Api, CustomObjectsApi, KubernetesObjectApi, loadYaml, PatchStrategy, setHeaderOptions, type KubeConfig, type KubernetesObject } from '@kubernetes/client-node';
import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { request } from 'node:https';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { CRD_GROUP, CRD_NAMES, CRD_VERSION } from '../api/crd.js';
import { FINALIZER, PROJECT_LABEL, type Condition, type ResourceStatus } from '../api/kubernetes.js';
import type { Fleet, Run } from '../api/objects.js';
import { parseSpecText } from '../api/parse.js';
import { startServer, type RunningServer } from '../server/server.js';
import { argoCdHealth } from './helpers/argocd-health.js';
import { installCrds } from './helpers/crds.js';
import { CLUSTER_START_TIMEOUT_MS, startKubeCluster, type KubeCluster } from './helpers/kube-apiserver.js';
import { kstatusBinary, kstatusOf } from './helpers/kstatus.js';
import { freePort } from './helpers/ports.js';
import { eventually, FAST_TIMINGS, LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const NAMESPACE = 'gitops';
/** The server calls the API server as the service account of manifests/, with the ClusterRole given there and no more. */
const SERVER_ACCOUNT = 'system:serviceaccount:orchestrator:orchestrator-server';
const RBAC_MANIFESTS = ['namespace.yaml', 'service-account.yaml', 'cluster-role.yaml', 'cluster-role-binding.yaml'];

interface Resource {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; generation?: number; finalizers?: string[]; deletionTimestamp?: string; resourceVersion?: string };
  spec: Record<string, unknown>;
  status?: ResourceStatus;
}

const PLURALS = Object.fromEntries(Object.values(CRD_NAMES).map((names) => [names.kind, names.plural]));

function serverConfig(kubeconfig: string, serverUrl: string): string {
  return `server_url: ${serverUrl}
${LOCAL_CONFIG}- name: team
  backends:
  - type: local
    runtime: process
kubernetes:
  kubeconfig: ${kubeconfig}
  watch:
    project: main
`;
}

function condition(object: Resource | null, type: Condition['type']): Condition | undefined {
  return object?.status?.conditions.find((c) => c.type === type);
}

/** `kubectl get`'s table of a kind: the printer columns and each row's cells. */
function table(kubeConfig: KubeConfig, path: string): Promise<{ columns: string[]; rows: unknown[][] }> {
  const options = { method: 'GET', headers: { accept: 'application/json;as=Table;v=v1;g=meta.k8s.io' } as Record<string, string> };
  return kubeConfig.applyToHTTPSOptions(options).then(() => new Promise((resolve, reject) => {
    const server = new URL(kubeConfig.getCurrentCluster()!.server);
    request({ ...options, host: server.hostname, port: server.port, path }, (response) => {
      let body = '';
      response.on('data', (chunk) => { body += chunk; });
      response.on('end', () => {
        const parsed = JSON.parse(body);
        resolve({ columns: parsed.columnDefinitions.map((c: { name: string }) => c.name), rows: parsed.rows.map((r: { cells: unknown[] }) => r.cells) });
      });
    }).on('error', reject).end();
  }));
}

describe('kubernetes source controller, against a real kube-apiserver', function () {
  this.timeout(120_000);
  let cluster: KubeCluster;
  let server: TestServer;
  let objects: CustomObjectsApi;
  let kstatus: string;

  const read = async (kind: string, name: string): Promise<Resource | null> => {
    try {
      return await objects.getNamespacedCustomObject({ group: CRD_GROUP, version: CRD_VERSION, namespace: NAMESPACE, plural: PLURALS[kind], name });
    } catch (error) {
      if ((error as { code?: number }).code === 404) return null;
      throw error;
    }
  };
  const create = (object: Resource, api = objects): Promise<Resource> =>
    api.createNamespacedCustomObject({ group: CRD_GROUP, version: CRD_VERSION, namespace: NAMESPACE, plural: PLURALS[object.kind], body: object });
  const mergePatch = (kind: string, name: string, body: object): Promise<Resource> =>
    objects.patchNamespacedCustomObject({ group: CRD_GROUP, version: CRD_VERSION, namespace: NAMESPACE, plural: PLURALS[kind], name, body }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  const remove = (kind: string, name: string, api = objects) =>
    api.deleteNamespacedCustomObject({ group: CRD_GROUP, version: CRD_VERSION, namespace: NAMESPACE, plural: PLURALS[kind], name });
  const task = (name: string, spec: Record<string, unknown>): Resource => ({ apiVersion: `${CRD_GROUP}/${CRD_VERSION}`, kind: 'Task', metadata: { name }, spec });
  const example = (file: string): Resource => parse(readFileSync(join(ROOT, 'examples', 'kubernetes', file), 'utf8'));
  /** Waits until the object's status satisfies `check`, for the generation it has then. */
  const statusOf = (kind: string, name: string, check: (object: Resource) => boolean, what: string, timeoutMs = 60_000) =>
    eventually(async () => {
      const object = await read(kind, name);
      return object && object.status?.observedGeneration === object.metadata.generation && check(object) ? object : undefined;
    }, timeoutMs, `${kind} ${name}: ${what}`);
  const run = async (name: string): Promise<Run> => (await server.api('GET', `/api/projects/main/runs/${name}`)).body;

  before(async function () {
    this.timeout(CLUSTER_START_TIMEOUT_MS);
    [cluster, kstatus] = await Promise.all([startKubeCluster([SERVER_ACCOUNT]), kstatusBinary()]);
    objects = cluster.kubeConfig.makeApiClient(CustomObjectsApi);
    await cluster.kubeConfig.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: NAMESPACE } } });
    const manifests = KubernetesObjectApi.makeApiClient(cluster.kubeConfig);
    for (const file of RBAC_MANIFESTS) await manifests.create(loadYaml<KubernetesObject>(readFileSync(join(ROOT, 'manifests', file), 'utf8')));
  });

  after(async function () {
    this.timeout(60_000);
    if (server) {
      for (const fleet of (await server.api('GET', '/api/projects/main/fleets')).body as Fleet[]) await server.api('DELETE', `/api/projects/main/fleets/${fleet.name}`);
      await server.stop();
    }
    await cluster?.stop();
  });

  it('installs the generated CRDs: structural schemas the API server accepts, established', async () => {
    await installCrds(cluster.kubeConfig);
    const port = await freePort();
    server = await startTestServer('postgres', serverConfig(cluster.kubeconfigPathOf(SERVER_ACCOUNT), `http://localhost:${port}`), { port });
  });

  it('applies the examples: the fleet, then the task runs to its exit code, with kstatus conditions and printer columns', async () => {
    await create(example('fleet.yaml'));
    const created = await create(example('task.yaml'));
    const done = await statusOf('Task', 'hello', (o) => o.status?.status === 'done', 'done');
    expect(done.status!.exitCode).to.equal(0);
    expect(condition(done, 'Ready')).to.include({ status: 'True', reason: 'Succeeded', observedGeneration: 1 });
    expect(condition(done, 'Reconciling')).to.equal(undefined);
    expect(condition(done, 'Stalled')).to.equal(undefined);
    expect(done.status!.project).to.equal('main');
    expect(done.status!.instance).to.be.a('string');
    expect(done.metadata.finalizers).to.include(FINALIZER);
    // The controller never writes the spec: the generation and the spec are what the API server made of the file.
    expect(done.metadata.generation).to.equal(1);
    expect(done.spec).to.deep.equal(created.spec);
    expect(argoCdHealth(done).status).to.equal('Healthy');
    const events = await eventually(async () => {
      const list = await cluster.kubeConfig.makeApiClient(CoreV1Api).listNamespacedEvent({ namespace: NAMESPACE, fieldSelector: 'involvedObject.name=hello,involvedObject.kind=Task' });
      return list.items.some((e) => e.reason === 'Succeeded') ? list.items : undefined;
    }, 10_000, 'the Succeeded event of task hello');
    expect(events.find((e) => e.reason === 'Succeeded')).to.deep.include({ type: 'Normal' });

    const hello = await run('hello');
    expect(hello).to.include({ status: 'done', exitCode: 0, user: 'kubernetes' });
    const fleet = await statusOf('Fleet', 'local', (o) => condition(o, 'Ready')?.status === 'True', 'ready');
    expect(fleet.status!.status).to.equal('active');

    const failing = await create(task('exit-three', { commands: ['echo about to fail', 'exit 3'] }));
    const failed = await statusOf('Task', failing.metadata.name, (o) => o.status?.status === 'failed', 'failed');
    expect(failed.status!.exitCode).to.equal(3);
    expect(condition(failed, 'Stalled')).to.include({ status: 'True', reason: 'FailedByUserCode' });
    expect(condition(failed, 'Ready')).to.include({ status: 'False', reason: 'FailedByUserCode' });
    expect(argoCdHealth(failed).status).to.equal('Degraded');

    const shown = await table(cluster.kubeConfig, `/apis/${CRD_GROUP}/${CRD_VERSION}/namespaces/${NAMESPACE}/tasks`);
    expect(shown.columns).to.deep.equal(['Name', 'Status', 'GPU', 'Exit', 'Instance', 'Message', 'Ready', 'Age']);
    const row = (name: string) => shown.rows.find((cells) => cells[0] === name)!;
    expect(row('hello').slice(1, 4)).to.deep.equal(['done', '-', 0]);
    expect(row('exit-three')[3]).to.equal(3);
    expect(row('exit-three')[6]).to.equal('False');
  });

  it('does not run a finished task again when its run is deleted with the CLI, but runs a changed spec', async () => {
    expect((await server.api('DELETE', '/api/projects/main/runs/exit-three')).status).to.equal(204);
    // Every deletion wakes the source controller; a second of looks finds no new run.
    for (let look = 0; look < 5; look++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      expect((await server.api('GET', '/api/projects/main/runs/exit-three')).status, `look ${look}`).to.equal(404);
    }
    expect((await read('Task', 'exit-three'))!.status).to.include({ status: 'failed', exitCode: 3 });
    await mergePatch('Task', 'exit-three', { spec: { commands: ['echo fixed'] } });
    const fixed = await statusOf('Task', 'exit-three', (o) => o.status?.status === 'done', 'the changed spec done');
    expect(fixed.status!.exitCode).to.equal(0);
    expect((await run('exit-three')).spec.commands).to.deep.equal(['echo fixed']);
  });

  it('sets Stalled with the message the CLI prints for an invalid spec, applies nothing, and runs the corrected generation', async () => {
    const body = { resources: { gpu: 'H10' }, commands: ['echo fixed'] };
    await create(task('bad-gpu', body));
    const stalled = await statusOf('Task', 'bad-gpu', (o) => condition(o, 'Stalled')?.status === 'True', 'stalled');
    const [cliError] = parseSpecText('type: task\nname: bad-gpu\nresources:\n  gpu: H10\ncommands: [echo fixed]\n', 'bad-gpu.yml', {}).errors;
    expect(condition(stalled, 'Stalled')).to.include({ reason: 'InvalidSpec', message: `spec.${cliError.path}: ${cliError.message}` });
    expect(condition(stalled, 'Stalled')!.message).to.match(/^spec\.resources\.gpu: .*H10.*H100/);
    expect(condition(stalled, 'Ready')).to.include({ status: 'False', reason: 'InvalidSpec' });
    const warnings = await cluster.kubeConfig.makeApiClient(CoreV1Api).listNamespacedEvent({ namespace: NAMESPACE, fieldSelector: 'involvedObject.name=bad-gpu,type=Warning' });
    expect(warnings.items.map((e) => [e.reason, e.message])).to.deep.include(['InvalidSpec', condition(stalled, 'Stalled')!.message]);
    expect((await server.api('GET', '/api/projects/main/runs/bad-gpu')).status).to.equal(404);

    await mergePatch('Task', 'bad-gpu', { spec: { resources: null } });
    const fixed = await statusOf('Task', 'bad-gpu', (o) => o.status?.status === 'done', 'done after the fix');
    expect(fixed.metadata.generation).to.equal(2);
    expect(condition(fixed, 'Stalled')).to.equal(undefined);
  });

  it('stops a running task when its object is deleted, and lets the object go only then', async () => {
    await create(task('sleeper', { commands: ['sleep 600'] }));
    await statusOf('Task', 'sleeper', (o) => o.status?.status === 'running', 'running');
    await remove('Task', 'sleeper');
    const held = await read('Task', 'sleeper');
    expect(held?.metadata.deletionTimestamp, 'the finalizer holds the object').to.be.a('string');
    await eventually(async () => (await read('Task', 'sleeper')) === null, 60_000, 'the object to go');
    expect(await run('sleeper')).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
  });

  it('runs a DevEnvironment object until it is deleted: its init runs once, Ready while it runs, stopped by the finalizer', async () => {
    const created = await create({
      apiVersion: `${CRD_GROUP}/${CRD_VERSION}`, kind: 'DevEnvironment', metadata: { name: 'workbench' },
      spec: { init: ['echo prepared by init'], inactivity_duration: 'off' },
    });
    const running = await statusOf('DevEnvironment', 'workbench', (o) => o.status?.status === 'running', 'running');
    expect(condition(running, 'Ready')).to.include({ status: 'True', reason: 'Running', observedGeneration: 1 });
    expect(running.spec).to.deep.equal(created.spec);
    expect(await run('workbench')).to.include({ kind: 'dev-environment', status: 'running', user: 'kubernetes' });
    const logs = await eventually(async () => {
      const page = (await server.api('GET', '/api/projects/main/runs/workbench/logs')).body as { lines: { text: string }[] };
      return page.lines.some((line) => line.text === 'prepared by init') && page.lines;
    }, 20_000, 'the init output');
    expect(logs.filter((line) => line.text === 'prepared by init')).to.have.length(1);
    await remove('DevEnvironment', 'workbench');
    await eventually(async () => (await read('DevEnvironment', 'workbench')) === null, 60_000, 'the object to go');
    expect(await run('workbench')).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
  });

  it('applies a task spec change as a re-apply: the running run stops, then the new spec runs', async () => {
    await create(task('changing', { commands: ['sleep 600'] }));
    const first = await statusOf('Task', 'changing', (o) => o.status?.status === 'running', 'running');
    await mergePatch('Task', 'changing', { spec: { commands: ['echo second generation'] } });
    const second = await statusOf('Task', 'changing', (o) => o.status?.status === 'done', 'the second generation done');
    expect(second.metadata.generation).to.equal(2);
    expect(second.status!.submittedAt).to.not.equal(first.status!.submittedAt);
    const replaced = await run('changing');
    expect(replaced.spec.commands).to.deep.equal(['echo second generation']);
    const events = (await server.api('GET', '/api/projects/main/events?object=changing')).body as { reason: string; message: string }[];
    expect(events.find((e) => e.reason === 'Stopping')?.message).to.equal(`generation 2 of task ${NAMESPACE}/changing replaces it`);
  });

  it('does not take over a run applied otherwise: Stalled with the message apply gets, then its own run once that one ends', async () => {
    const applied = await server.api('POST', '/api/projects/main/runs/apply', { spec: { type: 'task', name: 'taken', commands: ['sleep 600'] } });
    expect(applied.status).to.equal(201);
    await create(task('taken', { commands: ['echo mine'] }));
    const stalled = await statusOf('Task', 'taken', (o) => condition(o, 'Stalled')?.status === 'True', 'stalled');
    expect(condition(stalled, 'Stalled')).to.include({ reason: 'NameInUse', message: 'run taken is still active; stop it first (orchestrator stop taken) or choose another name' });
    expect((await server.api('POST', '/api/projects/main/runs/taken/stop', {})).status).to.equal(202);
    const done = await statusOf('Task', 'taken', (o) => o.status?.status === 'done', 'its own run done');
    expect(condition(done, 'Stalled')).to.equal(undefined);
    expect((await run('taken')).spec.commands).to.deep.equal(['echo mine']);
  });

  it('makes a task stopped with orchestrator stop Stalled (StoppedByUser), which kstatus reads as Failed and Argo CD as Degraded', async () => {
    await create(task('halted', { commands: ['sleep 600'] }));
    await statusOf('Task', 'halted', (o) => o.status?.status === 'running', 'running');
    expect((await server.api('POST', '/api/projects/main/runs/halted/stop', {})).status).to.equal(202);
    const stopped = await statusOf('Task', 'halted', (o) => o.status?.status === 'terminated', 'terminated');
    expect(condition(stopped, 'Stalled')).to.include({ status: 'True', reason: 'StoppedByUser' });
    expect(kstatusOf(kstatus, [stopped])).to.deep.equal([{ status: 'Failed', message: condition(stopped, 'Stalled')!.message }]);
    expect(argoCdHealth(stopped).status).to.equal('Degraded');
  });

  const listening = (answer: string) => `node -e "require('http').createServer((q, s) => s.end('${answer}')).listen(process.env.PORT)"`;
  const service = (answer: string) => ({ port: 8000, commands: [listening(answer)], probes: [{ type: 'http', url: '/', interval: '1s' }] });

  it('rolls a service over to a new generation, with its URL in the status, and stops it when deleted', async () => {
    await create({ apiVersion: `${CRD_GROUP}/${CRD_VERSION}`, kind: 'Service', metadata: { name: 'web' }, spec: service('first') });
    const ready = await statusOf('Service', 'web', (o) => condition(o, 'Ready')?.status === 'True' && !condition(o, 'Reconciling'), 'ready');
    expect(ready.status!.serviceUrl).to.equal(`http://localhost:${new URL(server.url).port}/proxy/services/main/web/`);
    const answer = async () => (await fetch(ready.status!.serviceUrl!, { headers: { authorization: `Bearer ${server.adminToken}` } })).text();
    expect(await answer()).to.equal('first');

    await mergePatch('Service', 'web', { spec: { commands: [listening('second')] } });
    await statusOf('Service', 'web', (o) => condition(o, 'Ready')?.status === 'True' && !condition(o, 'Reconciling'), 'rolled over');
    expect(await answer()).to.equal('second');
    expect((await run('web')).generation).to.equal(2);

    await remove('Service', 'web');
    await eventually(async () => (await read('Service', 'web')) === null, 60_000, 'the service object to go');
    expect((await run('web')).status).to.equal('terminated');
  });

  it('keeps a Service whose new generation exits at once Ready on the old one, Stalled with RolloutFailed, and Degraded in Argo CD', async () => {
    await create({ apiVersion: `${CRD_GROUP}/${CRD_VERSION}`, kind: 'Service', metadata: { name: 'sturdy' }, spec: service('first') });
    const ready = await statusOf('Service', 'sturdy', (o) => condition(o, 'Ready')?.status === 'True' && !condition(o, 'Reconciling'), 'ready');
    const answer = async () => (await fetch(ready.status!.serviceUrl!, { headers: { authorization: `Bearer ${server.adminToken}` } })).text();

    await mergePatch('Service', 'sturdy', { spec: { commands: ['exit 1'] } });
    const stalled = await statusOf('Service', 'sturdy', (o) => condition(o, 'Stalled')?.status === 'True', 'stalled', 90_000);
    const message = 'rollout of generation 2 failed: 3 replicas in a row ended before becoming ready; the last: exited with code 1; generation 1 still serves 1 replica';
    expect(condition(stalled, 'Stalled')).to.include({ reason: 'RolloutFailed', message });
    expect(condition(stalled, 'Ready')).to.include({ status: 'True', message });
    expect(argoCdHealth(stalled)).to.deep.equal({ status: 'Degraded', message: `RolloutFailed: ${message}` });
    expect(await answer()).to.equal('first');

    await remove('Service', 'sturdy');
    await eventually(async () => (await read('Service', 'sturdy')) === null, 60_000, 'the service object to go');
  });

  it('applies a fleet spec change as a new generation, and deletes the fleet before its object', async () => {
    await create({ apiVersion: `${CRD_GROUP}/${CRD_VERSION}`, kind: 'Fleet', metadata: { name: 'growing' }, spec: { backends: ['local'], nodes: '0..1' } });
    await statusOf('Fleet', 'growing', (o) => o.status?.instances === 0 && condition(o, 'Ready')?.status === 'True', 'ready and empty');
    await mergePatch('Fleet', 'growing', { spec: { nodes: '1..2' } });
    const grown = await statusOf('Fleet', 'growing', (o) => o.status?.instances === 1 && condition(o, 'Reconciling') === undefined, 'one instance up', 60_000);
    expect(grown.metadata.generation).to.equal(2);
    const fleet: Fleet = (await server.api('GET', '/api/projects/main/fleets/growing')).body;
    expect(fleet).to.include({ generation: 2 });
    expect(fleet.spec.nodes).to.equal('1..2');

    await remove('Fleet', 'growing');
    await eventually(async () => (await read('Fleet', 'growing')) === null, 60_000, 'the fleet object to go');
    const fleets: Fleet[] = (await server.api('GET', '/api/projects/main/fleets')).body;
    expect(fleets.map((f) => f.name)).to.not.include('growing');
  });

  it('runs each object once with two servers on one cluster and one database', async () => {
    let second: RunningServer | undefined;
    try {
      // The same folder: its local backend knows the first server's instances, and so does not take them for orphans.
      second = await startServer({ port: 0, dir: server.dir, databaseUrl: server.databaseUrl, adminToken: 'test-admin-token', logLevel: 'error', instanceTimings: FAST_TIMINGS, controllerIntervalMs: 200 });
      const names = ['twin-a', 'twin-b', 'twin-c'];
      await Promise.all(names.map((name) => create(task(name, { commands: [`echo ${name}`] }))));
      for (const name of names) {
        const done = await statusOf('Task', name, (o) => o.status?.status === 'done', 'done');
        expect(done.status!.exitCode).to.equal(0);
        const events = (await server.api('GET', `/api/projects/main/events?object=${name}`)).body as { reason: string }[];
        expect(events.filter((e) => e.reason === 'Submitted'), `${name} was submitted once`).to.have.length(1);
        expect((await run(name)).attempt).to.equal(1);
      }
    } finally {
      await second?.close();
    }
  });

  it('keeps applying after an API server restart, re-listing what changed while it was away', async () => {
    await cluster.stopApiServer();
    const other = await cluster.startOtherApiServer();
    const otherObjects = other.kubeConfig.makeApiClient(CustomObjectsApi);
    try {
      await create(task('while-away', { commands: ['echo written while the first API server was down'] }), otherObjects);
      await remove('Task', 'exit-three', otherObjects);
    } finally {
      await other.stop();
    }
    await cluster.startApiServer();
    const done = await statusOf('Task', 'while-away', (o) => o.status?.status === 'done', 'done after the restart');
    expect(condition(done, 'Ready')).to.include({ status: 'True' });
    await eventually(async () => (await read('Task', 'exit-three')) === null, 30_000, 'the object deleted meanwhile to go');
  });

  it('moves the objects of a namespace labelled with another project: what they run in the old one stops first, a finished task is not run again', async () => {
    const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    const namespace = 'moving';
    const labelled = (project: string) => core.patchNamespace({ name: namespace, body: { metadata: { labels: { [PROJECT_LABEL]: project } } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    const inMoving = (kind: string, name: string) => ({ group: CRD_GROUP, version: CRD_VERSION, namespace, plural: PLURALS[kind], name });
    const readMoving = (kind: string, name: string): Promise<Resource | null> => objects.getNamespacedCustomObject(inMoving(kind, name)).catch(() => null);
    const statusIn = (kind: string, name: string, check: (status: ResourceStatus) => boolean, what: string) =>
      eventually(async () => {
        const object = await readMoving(kind, name);
        return object?.status && object.status.observedGeneration === object.metadata.generation && check(object.status) ? object.status : undefined;
      }, 60_000, `${kind} ${name}: ${what}`);
    const runIn = async (project: string, name: string) => (await server.api('GET', `/api/projects/${project}/runs/${name}`)).body;
    await core.createNamespace({ body: { metadata: { name: namespace, labels: { [PROJECT_LABEL]: 'main' } } } });
    const fleetIn = (project: string) => server.api('POST', `/api/projects/${project}/fleets/apply`, { spec: { type: 'fleet', name: 'pool', backends: ['local'], nodes: '0..2' } });
    expect((await fleetIn('team')).status).to.be.oneOf([200, 201]);
    const body = (kind: string, name: string, spec: Record<string, unknown>) => ({ apiVersion: `${CRD_GROUP}/${CRD_VERSION}`, kind, metadata: { name }, spec });
    await objects.createNamespacedCustomObject({ ...inMoving('Task', ''), body: body('Task', 'mover', { commands: ['sleep 600'] }) });
    await objects.createNamespacedCustomObject({ ...inMoving('Task', ''), body: body('Task', 'once', { commands: ['echo ran once'] }) });
    const before = await statusIn('Task', 'mover', (s) => s.status === 'running' && s.project === 'main', 'running in main');
    await statusIn('Task', 'once', (s) => s.status === 'done' && s.project === 'main', 'done in main');

    await labelled('team');
    const after = await statusIn('Task', 'mover', (s) => s.status === 'running' && s.project === 'team', 'running in team');
    expect(after.submittedAt).to.not.equal(before.submittedAt);
    expect(await runIn('main', 'mover')).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
    const events = (await server.api('GET', '/api/projects/main/events?object=mover')).body as { reason: string; message: string }[];
    expect(events.find((e) => e.reason === 'Stopping')?.message).to.equal(`task ${namespace}/mover moved to project team with its namespace`);
    const once = await readMoving('Task', 'once');
    expect(once!.status).to.include({ project: 'main', status: 'done' });
    expect((await server.api('GET', '/api/projects/team/runs/once')).status).to.equal(404);

    await objects.deleteNamespacedCustomObject(inMoving('Task', 'mover'));
    await eventually(async () => (await readMoving('Task', 'mover')) === null, 60_000, 'the moved object to go');
    expect(await runIn('team', 'mover')).to.include({ status: 'terminated', terminationReason: 'stopped_by_user' });
    await objects.deleteNamespacedCustomObject(inMoving('Task', 'once'));
    await eventually(async () => (await readMoving('Task', 'once')) === null, 60_000, 'the finished object to go');
    await server.api('DELETE', '/api/projects/team/fleets/pool');
  });

  it('sets Stalled for a namespace whose project the server does not have', async () => {
    const core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    await core.patchNamespace({ name: NAMESPACE, body: { metadata: { labels: { [PROJECT_LABEL]: 'elsewhere' } } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    try {
      await create(task('homeless', { commands: ['true'] }));
      const stalled = await statusOf('Task', 'homeless', (o) => condition(o, 'Stalled')?.status === 'True', 'stalled');
      expect(condition(stalled, 'Stalled')).to.include({ reason: 'UnknownProject' });
      expect(condition(stalled, 'Stalled')!.message).to.contain('project elsewhere is not in the orchestrator server\'s config.yml');
    } finally {
      await core.patchNamespace({ name: NAMESPACE, body: { metadata: { labels: { [PROJECT_LABEL]: null } } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    }
  });
});
