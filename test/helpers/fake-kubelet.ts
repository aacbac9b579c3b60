import {
  CoreV1Api, PatchStrategy, setHeaderOptions, Watch,
  type KubeConfig, type V1Container, type V1Node, type V1Pod, type V1PodCondition,
} from '@kubernetes/client-node';
import type { ChildProcess } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { startUntilListening } from '../../agent/launch.js';

/** A GPU node as the test declares it; the kubelet's part (capacity, Ready) is written through nodes/status. */
export interface FakeNode {
  name: string;
  labels: Record<string, string>;
  allocatable: Record<string, string>;
  taints?: { key: string; value?: string; effect: string }[];
}

/**
 * The scheduler and kubelets of a cluster without either, for the pods of one namespace, as kwok plays them: a new pod
 * is bound to the first node its node affinity and tolerations allow, or marked Unschedulable when none does or when
 * the test refuses scheduling; a bound pod's container is its `orchestrator agent` command run as a local process on the
 * pod's own loopback address (127.x.y.2, .3, ...), so that every agent listens on the same port as pods do on their
 * IPs, or on the address `podIp` gives; the pod is then Running with that podIP. A pod being deleted has its process
 * stopped and is then removed.
 */
export class FakeKubelet {
  private readonly core: CoreV1Api;
  private readonly agents = new Map<string, ChildProcess>();
  private readonly handling = new Map<string, Promise<void>>();
  private watching: AbortController | null = null;
  private stopped = false;
  private refusal: string | null = null;

  private readonly podIp: () => string;

  constructor(private readonly kubeConfig: KubeConfig, private readonly namespace: string, podIp?: () => string) {
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    const subnet = `127.${randomInt(1, 255)}.${randomInt(0, 256)}`;
    let host = 2;
    this.podIp = podIp ?? (() => `${subnet}.${host++}`);
  }

  /** Registers a node with its capacity and labels, Ready. */
  async addNode(node: FakeNode): Promise<void> {
    await this.core.createNode({ body: { metadata: { name: node.name, labels: node.labels }, spec: { taints: node.taints ?? [] } } });
    await this.core.patchNodeStatus({
      name: node.name,
      body: { status: { capacity: node.allocatable, allocatable: node.allocatable, conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'kubelet is posting ready status' }] } },
    }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
    // The API server taints a new node not-ready; the node lifecycle controller lifts that once the node is Ready.
    await this.core.patchNode({ name: node.name, body: { spec: { taints: node.taints ?? [] } } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  }

  /** From now on the scheduler leaves new pods Pending with PodScheduled=False and this message; null schedules again. */
  refuseScheduling(message: string | null): void {
    this.refusal = message;
  }

  /** The local agent process that plays the pod's container. */
  agentOf(pod: string): ChildProcess | undefined {
    return this.agents.get(pod);
  }

  async start(): Promise<void> {
    const watch = new Watch(this.kubeConfig);
    const resume = () => {
      if (!this.stopped) void this.start();
    };
    this.watching = await watch.watch(`/api/v1/namespaces/${this.namespace}/pods`, {}, (_phase, pod: V1Pod) => this.handle(pod), resume);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.watching?.abort();
    await Promise.all([...this.agents.keys()].map((name) => this.stopAgent(name)));
  }

  /** One change of a pod at a time: what a change calls for is decided on the pod as the API server has it then. */
  private handle(seen: V1Pod): void {
    const name = seen.metadata!.name!;
    const previous = this.handling.get(name) ?? Promise.resolve();
    const next = previous.then(() => this.step(name)).catch((error: Error) => {
      if (!this.stopped) console.error(`fake kubelet: pod ${name}: ${error.message}`);
    });
    this.handling.set(name, next);
  }

  private async step(name: string): Promise<void> {
    if (this.stopped) return;
    const pod = await this.core.readNamespacedPod({ name, namespace: this.namespace }).catch(() => null);
    if (!pod) return this.stopAgent(name);
    if (pod.metadata?.deletionTimestamp) {
      await this.stopAgent(name);
      await this.core.deleteNamespacedPod({ name, namespace: this.namespace, gracePeriodSeconds: 0 }).catch(() => undefined);
      return;
    }
    if (!pod.spec?.nodeName) return this.schedule(pod);
    if (pod.status?.phase === 'Pending' && !this.agents.has(name)) await this.run(pod);
  }

  private async schedule(pod: V1Pod): Promise<void> {
    const name = pod.metadata!.name!;
    const nodes = (await this.core.listNode()).items;
    const fits = nodes.filter((node) => matchesAffinity(pod, node) && toleratesTaints(pod, node));
    const refusal = this.refusal ?? (fits.length === 0 ? `0/${nodes.length} nodes are available: ${nodes.length} node(s) didn't match Pod's node affinity/selector.` : null);
    if (refusal) {
      if (pod.status?.conditions?.some((c) => c.type === 'PodScheduled' && c.message === refusal)) return;
      await this.patchStatus(name, { conditions: [{ type: 'PodScheduled', status: 'False', reason: 'Unschedulable', message: refusal, lastTransitionTime: new Date() }] });
      return;
    }
    await this.core.createNamespacedPodBinding({
      name, namespace: this.namespace,
      body: { apiVersion: 'v1', kind: 'Binding', metadata: { name }, target: { apiVersion: 'v1', kind: 'Node', name: fits[0]!.metadata!.name! } },
    });
  }

  /** Starts the container's command (the image's entrypoint is `orchestrator`) on the pod's address, then reports the pod Running. */
  private async run(pod: V1Pod): Promise<void> {
    const name = pod.metadata!.name!;
    const container = pod.spec!.containers[0]!;
    const ip = this.podIp();
    const args = [...container.args!];
    args[args.indexOf('--host') + 1] = ip;
    const { child } = await startUntilListening(args, await this.environment(container), false, 20_000);
    this.agents.set(name, child);
    child.once('exit', (code) => {
      if (this.agents.get(name) !== child) return;
      this.agents.delete(name);
      void this.patchStatus(name, {
        phase: code === 0 ? 'Succeeded' : 'Failed',
        containerStatuses: [{ name: container.name, image: container.image!, imageID: '', ready: false, restartCount: 0, state: { terminated: { exitCode: code ?? 137, reason: code === 0 ? 'Completed' : 'Error' } } }],
      }).catch(() => undefined);
    });
    const now = new Date();
    const condition = (type: string): V1PodCondition => ({ type, status: 'True', lastTransitionTime: now });
    await this.patchStatus(name, {
      phase: 'Running', podIP: ip, podIPs: [{ ip }], hostIP: '127.0.0.1', startTime: now,
      conditions: ['PodScheduled', 'Initialized', 'ContainersReady', 'Ready'].map(condition),
      containerStatuses: [{ name: container.name, image: container.image!, imageID: '', ready: true, started: true, restartCount: 0, state: { running: { startedAt: now } } }],
    });
  }

  /** The container's environment, values from Secrets read as the kubelet reads them; a Secret not there yet is waited for. */
  private async environment(container: V1Container): Promise<NodeJS.ProcessEnv> {
    const env: NodeJS.ProcessEnv = {};
    for (const variable of container.env ?? []) {
      const ref = variable.valueFrom?.secretKeyRef;
      if (!ref) {
        env[variable.name] = variable.value ?? '';
        continue;
      }
      for (let attempt = 0; ; attempt++) {
        const secret = await this.core.readNamespacedSecret({ name: ref.name!, namespace: this.namespace }).catch(() => null);
        const encoded = secret?.data?.[ref.key];
        if (encoded !== undefined) {
          env[variable.name] = Buffer.from(encoded, 'base64').toString();
          break;
        }
        if (attempt >= 100) throw new Error(`secret ${ref.name} has no key ${ref.key}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    return env;
  }

  private patchStatus(name: string, status: V1Pod['status']): Promise<V1Pod> {
    return this.core.patchNamespacedPodStatus({ name, namespace: this.namespace, body: { status } }, setHeaderOptions('Content-Type', PatchStrategy.MergePatch));
  }

  private async stopAgent(name: string): Promise<void> {
    const child = this.agents.get(name);
    if (!child) return;
    this.agents.delete(name);
    if (child.exitCode !== null || child.signalCode !== null) return;
    await new Promise((resolve) => {
      child.once('exit', resolve);
      child.kill('SIGTERM');
    });
  }
}

function matchesAffinity(pod: V1Pod, node: V1Node): boolean {
  const terms = pod.spec?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
  if (!terms) return true;
  const labels = node.metadata?.labels ?? {};
  return terms.some((term) => (term.matchExpressions ?? []).every((expression) =>
    expression.operator === 'In' && expression.values!.includes(labels[expression.key] ?? '')));
}

function toleratesTaints(pod: V1Pod, node: V1Node): boolean {
  return (node.spec?.taints ?? []).filter((taint) => taint.effect === 'NoSchedule').every((taint) =>
    (pod.spec?.tolerations ?? []).some((toleration) => toleration.key === taint.key
      && (toleration.operator === 'Exists' || toleration.value === taint.value)
      && (!toleration.effect || toleration.effect === taint.effect)));
}
