import { CoreV1Api, KubernetesObjectApi, loadYaml, type KubernetesObject, type V1Pod } from '@kubernetes/client-node';
import { expect } from 'chai';
import { readFileSync, rmSync } from 'node:fs';
import { networkInterfaces } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Offer } from '../api/offer.js';
import type { Instance, Run } from '../api/objects.js';
import { FakeKubelet } from './helpers/fake-kubelet.js';
import { CLUSTER_START_TIMEOUT_MS, startKubeCluster, type KubeCluster } from './helpers/kube-apiserver.js';
import { freePort } from './helpers/ports.js';
import { startServer, type RunningServer } from '../server/server.js';
import { eventually, FAST_TIMINGS, startTestServer, type TestServer } from './helpers/server.js';

const NAMESPACE = 'gpu-pods';
/** The server calls the API server as the manifests' service account, with only the rights manifests/kubernetes-backend grants. */
const SERVER_ACCOUNT = 'system:serviceaccount:orchestrator:orchestrator-server';
const BACKEND_RBAC = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'manifests', 'kubernetes-backend');

/** The backend's role and its binding in `namespace`, as manifests/kubernetes-backend has them for gpu-pods. */
function backendRbac(namespace: string): KubernetesObject[] {
  const read = (file: string) => loadYaml<KubernetesObject>(readFileSync(join(BACKEND_RBAC, file), 'utf8'));
  const namespaced = ['role.yaml', 'role-binding.yaml'].map((file) => ({ ...read(file), metadata: { ...read(file).metadata, namespace } }));
  return namespace === NAMESPACE ? [read('cluster-role.yaml'), read('cluster-role-binding.yaml'), ...namespaced] : namespaced;
}

async function callApi(server: RunningServer, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${server.url}${path}`, {
    method, headers: { authorization: `Bearer ${server.adminToken}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}
const GPU_TAINT = { key: 'nvidia.com/gpu', value: 'present', effect: 'NoSchedule' };

describe('kubernetes backend: GPU pods on a real kube-apiserver, with the test as scheduler and kubelet', function () {
  this.timeout(60_000);
  let cluster: KubeCluster;
  let kubelet: FakeKubelet;
  let core: CoreV1Api;
  let server: TestServer;

  const pods = async (): Promise<V1Pod[]> => (await core.listNamespacedPod({ namespace: NAMESPACE })).items;
  const podOfInstance = async (instanceId: string): Promise<V1Pod | undefined> =>
    (await pods()).find((pod) => pod.metadata?.labels?.['orchestrator.dev/instance'] === instanceId);
  const instancesOfFleet = async (fleet: string): Promise<Instance[]> =>
    ((await server.api('GET', '/api/projects/main/instances?all=true')).body as Instance[]).filter((i) => i.fleet === fleet);
  const apply = async (spec: Record<string, unknown>, kind: 'fleets' | 'runs', on: Pick<TestServer, 'api'> = server) => {
    const answer = await on.api('POST', `/api/projects/main/${kind}/apply`, { spec });
    expect(answer.status, JSON.stringify(answer.body)).to.be.oneOf([200, 201]);
  };
  const runToEnd = (name: string, on: Pick<TestServer, 'api'> = server) => eventually(async () => {
    const current = (await on.api('GET', `/api/projects/main/runs/${name}`)).body as Run;
    if (['failed', 'terminated'].includes(current.status)) throw new Error(`run ended ${current.status}: ${current.statusMessage}`);
    return current.status === 'done' ? current : undefined;
  }, 30_000, `run ${name} to be done`);
  const serverConfig = async (namespace: string, agentAddress: string) => `projects:
- name: main
  backends:
  - type: kubernetes
    kubeconfig: ${cluster.kubeconfigPathOf(SERVER_ACCOUNT)}
    namespace: ${namespace}
    agent_port: ${await freePort()}
    agent_address: ${agentAddress}
    unschedulable_timeout: 1s
`;

  before(async function () {
    this.timeout(CLUSTER_START_TIMEOUT_MS);
    cluster = await startKubeCluster([SERVER_ACCOUNT]);
    core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    await core.createNamespace({ body: { metadata: { name: NAMESPACE } } });
    for (const object of backendRbac(NAMESPACE)) await KubernetesObjectApi.makeApiClient(cluster.kubeConfig).create(object);
    kubelet = new FakeKubelet(cluster.kubeConfig, NAMESPACE);
    await kubelet.addNode({
      name: 'l4-node', labels: { 'nvidia.com/gpu.product': 'NVIDIA-L4', 'nvidia.com/gpu.count': '2' }, taints: [GPU_TAINT],
      allocatable: { cpu: '8', memory: '32Gi', 'ephemeral-storage': '100Gi', 'nvidia.com/gpu': '2', pods: '110' },
    });
    await kubelet.addNode({
      name: 'a100-node', labels: { 'cloud.google.com/gke-accelerator': 'nvidia-a100-80gb' }, taints: [GPU_TAINT],
      allocatable: { cpu: '16', memory: '128Gi', 'ephemeral-storage': '200Gi', 'nvidia.com/gpu': '1', pods: '110' },
    });
    // A pod without GPUs already on the L4 node (a node agent of the cluster's own): the GPU offers share what it leaves.
    await core.createNamespace({ body: { metadata: { name: 'monitoring' } } });
    await core.createNamespacedPod({
      namespace: 'monitoring',
      body: { metadata: { name: 'node-exporter' }, spec: { nodeName: 'l4-node', containers: [{ name: 'exporter', image: 'prom/node-exporter', resources: { requests: { cpu: '2', memory: '8Gi' } } }] } },
    });
    await kubelet.start();
    server = await startTestServer('pglite', await serverConfig(NAMESPACE, 'pod-ip'));
  });

  after(async function () {
    this.timeout(60_000);
    await server?.stop();
    await kubelet?.stop();
    await cluster?.stop();
  });

  it('offers each node\'s GPUs by the model its labels name, sharing what its other pods leave, less what pods hold', async () => {
    const { body } = await server.api('GET', '/api/projects/main/offers');
    expect(body.errors).to.deep.equal([]);
    const offers = body.offers as Offer[];
    const shape = (offerId: string) => {
      const offer = offers.find((o) => o.offerId === offerId);
      return offer && { gpu: offer.gpu, cpus: offer.cpus, memoryMib: offer.memoryMib, diskMib: offer.diskMib, availability: offer.availability, price: offer.pricePerHour };
    };
    expect(offers.map((o) => o.offerId).sort()).to.deep.equal(['a100-node/1xA100', 'l4-node/1xL4', 'l4-node/2xL4']);
    // 8 CPUs and 32Gi less the exporter's 2 CPUs and 8Gi, halved per GPU; the disk is the node's ephemeral storage.
    expect(shape('l4-node/1xL4')).to.deep.equal({ gpu: { name: 'L4', memoryMib: 24 * 1024, count: 1 }, cpus: 3, memoryMib: 12 * 1024, diskMib: 50 * 1024, availability: 'available', price: 0 });
    expect(shape('l4-node/2xL4')).to.deep.include({ cpus: 6, memoryMib: 24 * 1024, diskMib: 100 * 1024 });
    expect(shape('a100-node/1xA100')).to.deep.equal({ gpu: { name: 'A100', memoryMib: 80 * 1024, count: 1 }, cpus: 16, memoryMib: 128 * 1024, diskMib: 200 * 1024, availability: 'available', price: 0 });
  });

  it('runs a task that needs an L4 in a pod with its GPU limit, node affinity, toleration, shm volume and disk; deleting the fleet deletes the pod', async () => {
    // Open-ended, as dstack's docs write a kubernetes fleet: the cluster's nodes bound it.
    await apply({ type: 'fleet', name: 'cluster', backends: ['kubernetes'], nodes: '0..' }, 'fleets');
    // The pods' agents run jobs as processes: before any pod exists, the plan already says that an image is not used.
    const plan = (await server.api('POST', '/api/projects/main/runs/plan', { spec: { type: 'task', image: 'alpine:3.20', commands: ['true'], resources: { gpu: 'L4' } } })).body;
    expect(plan.runtime).to.equal('process');
    expect(plan.notActedOn.map((n: { field: string }) => n.field)).to.include('image');
    await apply({ type: 'task', name: 'on-l4', commands: ['echo hello from a pod'], resources: { gpu: 'L4', shm_size: '1GB' }, fleets: ['cluster'] }, 'runs');
    expect((await runToEnd('on-l4')).exitCode).to.equal(0);

    const [instance] = await instancesOfFleet('cluster');
    expect(instance).to.deep.include({ backend: 'kubernetes', gpu: { name: 'L4', memoryMib: 24 * 1024, count: 1 } });
    const pod = (await podOfInstance(instance!.id))!;
    expect(pod.status?.phase).to.equal('Running');
    expect(pod.spec?.nodeName).to.equal('l4-node');
    const container = pod.spec!.containers[0]!;
    expect(container.args?.slice(0, 1)).to.deep.equal(['agent']);
    expect(container.resources?.limits).to.deep.equal({ 'nvidia.com/gpu': '1' });
    expect(container.resources?.requests).to.deep.include({ cpu: '3', memory: '12Gi', 'ephemeral-storage': '50Gi' });
    expect(pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms).to.deep.equal([
      { matchExpressions: [{ key: 'nvidia.com/gpu.product', operator: 'In', values: ['NVIDIA-L4'] }] },
    ]);
    expect(pod.spec?.tolerations).to.deep.include({ key: 'nvidia.com/gpu', operator: 'Exists', effect: 'NoSchedule' });
    expect(pod.spec?.volumes).to.deep.include({ name: 'shm', emptyDir: { medium: 'Memory', sizeLimit: '1Gi' } });
    expect(container.volumeMounts).to.deep.include({ name: 'shm', mountPath: '/dev/shm' });
    // The agent's token is in a Secret the pod names, never in the pod's spec.
    expect(JSON.stringify(pod.spec)).not.to.contain((await core.readNamespacedSecret({ name: pod.metadata!.name!, namespace: NAMESPACE })).data!.token!);
    expect(container.env).to.deep.equal([{ name: 'ORCHESTRATOR_AGENT_TOKEN', valueFrom: { secretKeyRef: { name: pod.metadata!.name, key: 'token' } } }]);

    // While the pod holds one of the node's L4s, only the one-GPU offer of that node is available (offers are cached for 3 s).
    const availability = await eventually(async () => {
      const { body } = await server.api('GET', '/api/projects/main/offers?backend=kubernetes');
      const byId = Object.fromEntries((body.offers as Offer[]).map((o) => [o.offerId, o.availability]));
      return byId['l4-node/2xL4'] === 'unavailable' ? byId : undefined;
    }, 10_000, 'the two-L4 offer to be unavailable');
    expect(availability['l4-node/1xL4']).to.equal('available');

    const agent = kubelet.agentOf(pod.metadata!.name!)!;
    expect((await server.api('DELETE', '/api/projects/main/fleets/cluster')).status).to.equal(202);
    await eventually(async () => (await pods()).every((p) => p.metadata?.name !== pod.metadata!.name), 20_000, 'the pod to be deleted');
    expect(agent.exitCode !== null || agent.signalCode !== null, 'the agent process has ended').to.equal(true);
    await core.readNamespacedSecret({ name: pod.metadata!.name!, namespace: NAMESPACE }).then(
      () => expect.fail('the token Secret outlived its pod'),
      (error) => expect(error.code).to.equal(404),
    );
  });

  it('gives a pod that stays unschedulable up with the scheduler\'s reason, and deletes it', async () => {
    const reason = '0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn\'t match Pod\'s node affinity/selector.';
    kubelet.refuseScheduling(reason);
    await apply({ type: 'fleet', name: 'big', backends: ['kubernetes'], nodes: '0..1', resources: { gpu: 'A100' } }, 'fleets');
    await apply({ type: 'task', name: 'on-a100', commands: ['true'], resources: { gpu: 'A100' }, fleets: ['big'] }, 'runs');
    const ended = await eventually(async () =>
      (await instancesOfFleet('big')).find((i) => i.status === 'terminated' && i.statusMessage.includes(reason)), 20_000, 'the instance to be given up with the scheduler\'s reason');
    expect(ended.statusMessage).to.match(/could not be scheduled within 1s: 0\/2 nodes are available/);
    await eventually(async () => (await podOfInstance(ended.id)) === undefined, 20_000, 'the unschedulable pod to be deleted');
    kubelet.refuseScheduling(null);
    await server.api('POST', '/api/projects/main/runs/on-a100/stop');
    expect((await server.api('DELETE', '/api/projects/main/fleets/big')).status).to.equal(202);
  });

  it('reaches the agent through the API server\'s pod proxy, for a server outside the cluster, and again after the server restarts', async function () {
    // The API server proxies only to routable pod IPs, never to loopback: the pod gets this machine's own address.
    this.timeout(180_000);
    const address = Object.values(networkInterfaces()).flat().find((i) => i && i.family === 'IPv4' && !i.internal)?.address;
    if (!address) this.skip();
    const namespace = 'proxied';
    await core.createNamespace({ body: { metadata: { name: namespace } } });
    for (const object of backendRbac(namespace)) await KubernetesObjectApi.makeApiClient(cluster.kubeConfig).create(object);
    const proxiedKubelet = new FakeKubelet(cluster.kubeConfig, namespace, () => address!);
    await proxiedKubelet.start();
    const first = await startTestServer('pglite', await serverConfig(namespace, 'api-proxy'));
    let outside: RunningServer & Pick<TestServer, 'api'> = first;
    try {
      await apply({ type: 'fleet', name: 'outside', backends: ['kubernetes'], nodes: '0..1' }, 'fleets', outside);
      await apply({ type: 'task', name: 'through-proxy', commands: ['echo through the proxy'], resources: { gpu: 'A100' }, fleets: ['outside'] }, 'runs', outside);
      expect((await runToEnd('through-proxy', outside)).exitCode).to.equal(0);
      const [pod] = (await core.listNamespacedPod({ namespace })).items;
      expect(pod?.status?.podIP).to.equal(address);
      const { body: logs } = await outside.api('GET', '/api/projects/main/runs/through-proxy/logs');
      expect(JSON.stringify(logs)).to.contain('through the proxy');

      // A service's requests cross the relay and the API server's pod proxy too, over the gateway's tunnels to the agent.
      const port = await freePort();
      await apply({
        type: 'service', name: 'web-through-proxy', port, auth: false, resources: { gpu: 'A100' }, fleets: ['outside'],
        commands: ['echo served through the pod proxy > index.html', `python3 -m http.server ${port}`],
      }, 'runs', outside);
      const served = await eventually(async () => {
        const response = await fetch(`${outside.url}/proxy/services/main/web-through-proxy/`, { signal: AbortSignal.timeout(5000) }).catch(() => null);
        return response?.status === 200 ? response.text() : null;
      }, 60_000, 'the service to answer through the proxy').catch(async (error: Error) => {
        const run = (await outside.api('GET', '/api/projects/main/runs/web-through-proxy')).body as Run;
        throw new Error(`${error.message}; the service: ${JSON.stringify(run.service)} ${run.status} ${run.statusMessage}`);
      });
      expect(served).to.equal('served through the pod proxy\n');
      await outside.api('POST', '/api/projects/main/runs/web-through-proxy/stop');
      await eventually(async () => ['terminated', 'done', 'failed'].includes(((await outside.api('GET', '/api/projects/main/runs/web-through-proxy')).body as Run).status), 30_000, 'the service to stop');

      // A restarted server relays on another port: the idle pod's agent is found again and takes the next run.
      await first.close();
      const restarted = await startServer({ port: 0, dir: first.dir, adminToken: first.adminToken, logLevel: 'error', instanceTimings: FAST_TIMINGS, controllerIntervalMs: 200 });
      outside = { ...restarted, api: (method, path, body) => callApi(restarted, method, path, body) };
      await apply({ type: 'task', name: 'after-restart', commands: ['echo again'], resources: { gpu: 'A100' }, fleets: ['outside'] }, 'runs', outside);
      expect((await runToEnd('after-restart', outside)).exitCode).to.equal(0);
      expect((await core.listNamespacedPod({ namespace })).items.map((p) => p.metadata?.name)).to.deep.equal([pod!.metadata!.name]);

      expect((await outside.api('DELETE', '/api/projects/main/fleets/outside')).status).to.equal(202);
      await eventually(async () => (await core.listNamespacedPod({ namespace })).items.length === 0, 20_000, 'the proxied pod to be deleted');
    } finally {
      await outside.close();
      rmSync(first.dir, { recursive: true, force: true });
      await proxiedKubelet.stop();
    }
  });
});
