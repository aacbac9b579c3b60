import { ApiextensionsV1Api, CoreV1Api, CustomObjectsApi, PatchStrategy, setHeaderOptions } from '@kubernetes/client-node';
import { expect } from 'chai';
import { CRD_GROUP, CRD_NAMES, CRD_VERSION } from '../api/crd.js';
import { FINALIZER, type ResourceStatus } from '../api/kubernetes.js';
import type { Fleet, Instance, Run } from '../api/objects.js';
import type { Replica, ServiceInfo } from '../api/services.js';
import { fleetStatus, reconcilingStatus, runStatus, stalledStatus, type StatusContext } from '../server/kubernetes/status.js';
import { argoCdHealth } from './helpers/argocd-health.js';
import { installCrds } from './helpers/crds.js';
import { CLUSTER_START_TIMEOUT_MS, startKubeCluster, type KubeCluster } from './helpers/kube-apiserver.js';
import { kstatusBinary, kstatusOf } from './helpers/kstatus.js';
import { eventually } from './helpers/server.js';

const NAMESPACE = 'gitops';
const PLURALS = Object.fromEntries(Object.values(CRD_NAMES).map((names) => [names.kind, names.plural]));
const submitted = new Date('2026-01-01T00:00:00.000Z');
const context: StatusContext = { generation: 1, project: 'main', previous: undefined, now: submitted.toISOString(), serverUrl: null };

interface Resource {
  apiVersion: string;
  kind: string;
  metadata: { name: string; generation?: number; finalizers?: string[]; resourceVersion?: string };
  spec: Record<string, unknown>;
  status?: ResourceStatus;
}

function run(kind: string, fields: Partial<Run>): Run {
  return {
    id: 'r1', project: 'main', user: 'kubernetes', name: 'r', kind, status: 'running', statusMessage: '', terminationReason: null,
    priority: 0, generation: 1, attempt: 1, spec: {}, fleet: 'local', instance: 'local-1', gpu: null, pricePerHour: null, cost: 0, exitCode: null,
    queuePosition: null, service: null, ssh: null, submittedAt: submitted.toISOString(), startedAt: null, finishedAt: null, inactivityStopAt: null,
    ...fields,
  };
}

function ended(kind: string, status: 'failed' | 'terminated', terminationReason: string, statusMessage: string): Run {
  return run(kind, { status, terminationReason, statusMessage, exitCode: status === 'terminated' ? 143 : 1 });
}

function replica(number: number, generation: number, state: Replica['state']): Replica {
  return { replica: number, group: null, generation, state, statusMessage: state, instance: 'local-1', startedAt: null, readyAt: null };
}

function service(generation: number, replicas: Replica[], desiredReplicas = 1, stall: ServiceInfo['stall'] = null): Run {
  return run('service', {
    generation,
    service: { desiredReplicas, replicas, stableGeneration: 1, stall, path: '/proxy/services/main/r/', model: null, modelPath: null, gatewayUrl: null, gatewayModelUrl: null },
  });
}

const STALL_MESSAGE = 'rollout of generation 2 failed: 3 replicas in a row ended before becoming ready; the last: exited with code 1';

function fleet(status: Fleet['status'], instances: Instance['status'][] = [], statusMessage = ''): Fleet {
  return {
    id: 'f1', project: 'main', name: 'f', status, statusMessage, generation: 1, spec: {}, createdAt: submitted.toISOString(),
    instances: instances.map((instanceStatus) => ({ status: instanceStatus }) as Instance),
  };
}

/** A valid spec of each kind. */
const SPECS: Record<string, Record<string, unknown>> = {
  Task: { commands: ['true'] },
  Service: { port: 8000, commands: ['python3 -m http.server'] },
  DevEnvironment: { ide: 'vscode' },
  Fleet: { nodes: 1 },
};

const taskStatus = (fields: Partial<Run>) => runStatus(context, run('task', fields), submitted);

/** Each state an object can reach, the status the orchestrator writes for it, and what kstatus and Argo CD read: the table of docs/kubernetes.md. */
const TABLE: { kind: string; state: string; status: ResourceStatus; kstatus: string; argoCd: string }[] = [
  { kind: 'Task', state: 'queued', status: taskStatus({ status: 'submitted', statusMessage: 'waiting to be scheduled' }), kstatus: 'InProgress', argoCd: 'Progressing' },
  { kind: 'Task', state: 'provisioning', status: taskStatus({ status: 'provisioning' }), kstatus: 'InProgress', argoCd: 'Progressing' },
  { kind: 'Task', state: 'running', status: taskStatus({ status: 'running' }), kstatus: 'Current', argoCd: 'Healthy' },
  { kind: 'Task', state: 'scheduled, between runs', status: taskStatus({ status: 'pending', schedule: { cron: ['0 * * * *'], nextRunAt: null, lastRun: null } }), kstatus: 'Current', argoCd: 'Healthy' },
  { kind: 'Task', state: 'terminating', status: taskStatus({ status: 'terminating' }), kstatus: 'InProgress', argoCd: 'Progressing' },
  { kind: 'Task', state: 'done', status: taskStatus({ status: 'done', terminationReason: 'done_by_user_code', exitCode: 0 }), kstatus: 'Current', argoCd: 'Healthy' },
  { kind: 'Task', state: 'failed', status: runStatus(context, ended('task', 'failed', 'failed_by_user_code', 'exited with code 1'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Task', state: 'no offers', status: runStatus(context, ended('task', 'failed', 'no_offers', 'no offer matches'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Task', state: 'stopped', status: runStatus(context, ended('task', 'terminated', 'stopped_by_user', 'stopped (stopped by user)'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Task', state: 'aborted', status: runStatus(context, ended('task', 'terminated', 'aborted_by_user', 'stopped (aborted by user)'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Task', state: 'past max_duration', status: runStatus(context, ended('task', 'terminated', 'max_duration_exceeded', 'stopped (max duration exceeded)'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Task', state: 'invalid spec', status: stalledStatus(context, 'InvalidSpec', 'spec.resources.gpu: unknown GPU model "H10"'), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Task', state: 'name in use', status: stalledStatus(context, 'NameInUse', 'run r is still active'), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Task', state: 'a new generation replacing its run', status: reconcilingStatus(context, 'Replacing', 'stopping run r to apply generation 1'), kstatus: 'InProgress', argoCd: 'Progressing' },
  { kind: 'Service', state: 'starting', status: runStatus(context, service(1, [replica(0, 1, 'starting')]), submitted), kstatus: 'InProgress', argoCd: 'Progressing' },
  { kind: 'Service', state: 'ready', status: runStatus(context, service(1, [replica(0, 1, 'ready')]), submitted), kstatus: 'Current', argoCd: 'Healthy' },
  { kind: 'Service', state: 'scaled to zero', status: runStatus(context, service(1, [], 0), submitted), kstatus: 'Current', argoCd: 'Healthy' },
  { kind: 'Service', state: 'rolling to a new generation', status: runStatus(context, service(2, [replica(0, 1, 'ready'), replica(1, 2, 'starting')]), submitted), kstatus: 'InProgress', argoCd: 'Progressing' },
  { kind: 'Service', state: 'rollout stalled, the old generation serving', status: runStatus(context, service(2, [replica(0, 1, 'ready'), replica(1, 2, 'terminated')], 1, { generation: 2, reason: 'failing', message: STALL_MESSAGE }), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Service', state: 'stopped', status: runStatus(context, ended('service', 'terminated', 'stopped_by_user', 'every replica stopped'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Service', state: 'aborted', status: runStatus(context, ended('service', 'terminated', 'aborted_by_user', 'every replica stopped'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'DevEnvironment', state: 'running', status: runStatus(context, run('dev-environment', { status: 'running' }), submitted), kstatus: 'Current', argoCd: 'Healthy' },
  { kind: 'DevEnvironment', state: 'stopped', status: runStatus(context, ended('dev-environment', 'terminated', 'stopped_by_user', 'stopped (stopped by user)'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'DevEnvironment', state: 'past inactivity_duration', status: runStatus(context, ended('dev-environment', 'terminated', 'inactivity_duration_exceeded', 'stopped (inactivity duration exceeded)'), submitted), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Fleet', state: 'active', status: fleetStatus(context, fleet('active', ['idle'])), kstatus: 'Current', argoCd: 'Healthy' },
  { kind: 'Fleet', state: 'instances starting', status: fleetStatus(context, fleet('active', ['idle', 'provisioning'])), kstatus: 'InProgress', argoCd: 'Progressing' },
  { kind: 'Fleet', state: 'terminating', status: fleetStatus(context, fleet('terminating', ['busy'], 'waiting for 1 busy instance to finish')), kstatus: 'InProgress', argoCd: 'Progressing' },
  { kind: 'Fleet', state: 'terminated', status: fleetStatus(context, fleet('terminated', [], 'deleted')), kstatus: 'Failed', argoCd: 'Degraded' },
  { kind: 'Fleet', state: 'failed', status: fleetStatus(context, fleet('failed', [], 'no offers')), kstatus: 'Failed', argoCd: 'Degraded' },
];

describe('kstatus (Flux, kpt) and Argo CD read every state of the custom resources alike, on a real kube-apiserver', function () {
  this.timeout(60_000);
  let cluster: KubeCluster;
  let objects: CustomObjectsApi;
  let kstatus: string;
  let count = 0;

  const path = (kind: string) => ({ group: CRD_GROUP, version: CRD_VERSION, namespace: NAMESPACE, plural: PLURALS[kind] });
  const read = (kind: string, name: string): Promise<Resource> => objects.getNamespacedCustomObject({ ...path(kind), name });
  /** A new object of `kind`, as the API server returns it, with nothing written to its status. */
  const create = (kind: string, metadata: Partial<Resource['metadata']> = {}): Promise<Resource> =>
    objects.createNamespacedCustomObject({ ...path(kind), body: { apiVersion: `${CRD_GROUP}/${CRD_VERSION}`, kind, metadata: { name: `object-${++count}`, ...metadata }, spec: SPECS[kind] } });
  /** Writes `status` through the status subresource, as a server does, and returns the object as the API server then has it. */
  const writeStatus = (object: Resource, status: ResourceStatus): Promise<Resource> =>
    objects.replaceNamespacedCustomObjectStatus({ ...path(object.kind), name: object.metadata.name, body: { ...object, status } });
  const mergePatch = (object: Resource, body: object): Promise<Resource> =>
    objects.patchNamespacedCustomObject({ ...path(object.kind), name: object.metadata.name, body }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  /** What Flux and Argo CD each make of the object. */
  const readings = (object: Resource) => ({ kstatus: kstatusOf(kstatus, [object])[0], argoCd: argoCdHealth(object) });

  before(async function () {
    this.timeout(CLUSTER_START_TIMEOUT_MS);
    [cluster, kstatus] = await Promise.all([startKubeCluster(), kstatusBinary()]);
    objects = cluster.kubeConfig.makeApiClient(CustomObjectsApi);
    await cluster.kubeConfig.makeApiClient(CoreV1Api).createNamespace({ body: { metadata: { name: NAMESPACE } } });
    await installCrds(cluster.kubeConfig);
  });

  after(async () => {
    await cluster?.stop();
  });

  it('reads each state of a Task, Service, DevEnvironment and Fleet as the table of docs/kubernetes.md says', async () => {
    const stored: Resource[] = [];
    for (const row of TABLE) stored.push(await writeStatus(await create(row.kind), row.status));
    const computed = kstatusOf(kstatus, stored);
    const read = TABLE.map((row, index) => ({ kind: row.kind, state: row.state, kstatus: computed[index].status, argoCd: argoCdHealth(stored[index]).status }));
    expect(read).to.deep.equal(TABLE.map(({ kind, state, kstatus, argoCd }) => ({ kind, state, kstatus, argoCd })));
    // Stopped on purpose says why, to Flux and to Argo CD.
    const stopped = TABLE.findIndex((row) => row.kind === 'Task' && row.state === 'stopped');
    expect(computed[stopped].message).to.equal('stopped (stopped by user)');
    expect(argoCdHealth(stored[stopped]).message).to.equal('StoppedByUser: stopped (stopped by user)');
  });

  it('reads an object no server has written a status to as in progress, of every kind', async () => {
    for (const kind of Object.keys(PLURALS)) {
      const created = await create(kind);
      expect(created.status, `${kind} as created`).to.deep.equal({ observedGeneration: 0, conditions: [] });
      const unobserved = await read(kind, created.metadata.name);
      expect(readings(unobserved), kind).to.deep.equal({
        kstatus: { status: 'InProgress', message: `${kind} generation is 1, but latest observed generation is 0` },
        argoCd: { status: 'Progressing', message: 'Waiting for the orchestrator to apply this generation' },
      });
    }
  });

  it('reads an object changed while every server is down as in progress, until one observes the new generation', async () => {
    const running = await writeStatus(await create('Task'), taskStatus({ status: 'running' }));
    expect(readings(running).kstatus.status).to.equal('Current');
    const changed = await mergePatch(running, { spec: { commands: ['false'] } });
    expect(changed.metadata.generation).to.equal(2);
    expect(readings(changed).kstatus).to.deep.equal({ status: 'InProgress', message: 'Task generation is 2, but latest observed generation is 1' });
    expect(readings(changed).argoCd.status).to.equal('Progressing');
    const observed = await writeStatus(changed, runStatus({ ...context, generation: 2 }, run('task', { status: 'running', generation: 2 }), submitted));
    expect(readings(observed).kstatus.status).to.equal('Current');
  });

  it('reads an object stored before its CRD had the status default as in progress once the CRD has it', async () => {
    const extensions = cluster.kubeConfig.makeApiClient(ApiextensionsV1Api);
    const name = `${PLURALS.Task}.${CRD_GROUP}`;
    const crd = await extensions.readCustomResourceDefinition({ name });
    const statusSchema = crd.spec.versions[0].schema!.openAPIV3Schema!.properties!.status;
    const withDefault = statusSchema._default;
    delete statusSchema._default;
    await extensions.replaceCustomResourceDefinition({ name, body: crd });
    const older = await eventually(async () => {
      const created = await create('Task');
      return created.status === undefined ? created : undefined;
    }, 20_000, 'a Task stored without status');
    // What the issue was: kstatus counts an object without status as current.
    expect(readings(older).kstatus.status).to.equal('Current');

    const current = await extensions.readCustomResourceDefinition({ name });
    current.spec.versions[0].schema!.openAPIV3Schema!.properties!.status._default = withDefault;
    await extensions.replaceCustomResourceDefinition({ name, body: current });
    const reread = await eventually(async () => {
      const object = await read('Task', older.metadata.name);
      return object.status ? object : undefined;
    }, 20_000, 'the stored Task read with the default status');
    expect(reread.status).to.deep.equal({ observedGeneration: 0, conditions: [] });
    expect(readings(reread).kstatus.status).to.equal('InProgress');
  });

  it('reads a deleted object that the finalizer holds while its run stops as terminating', async () => {
    const running = await writeStatus(await create('Task', { finalizers: [FINALIZER] }), taskStatus({ status: 'running' }));
    await objects.deleteNamespacedCustomObject({ ...path('Task'), name: running.metadata.name });
    const deleting = await read('Task', running.metadata.name);
    const stopping = await writeStatus(deleting, reconcilingStatus(context, 'Stopping', 'stopping run r before the object is deleted'));
    expect(readings(stopping).kstatus.status).to.equal('Terminating');
    // Argo CD shows an object with a deletionTimestamp as Progressing before it runs any health check; the check agrees.
    expect(readings(stopping).argoCd.status).to.equal('Progressing');
    await mergePatch(stopping, { metadata: { finalizers: null } });
  });
});
