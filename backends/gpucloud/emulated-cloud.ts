import { randomBytes } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { DECLARED_GPU_UTILIZATION_FILE } from '../../api/agent.js';
import { adoptAgent, type AgentLauncher, type AgentProcess } from './agent-process.js';
import type { CreateClusterBody, CreateInstanceBody, ErrorCode, GpuModel, GpucloudCluster, GpucloudInstance, GpucloudOffer, InstanceUsage, UsageList } from './api.js';
import { buildCatalog, GPU_SHAPES, NO_GPU_MODEL, REGIONS, type CatalogOffer } from './catalog.js';
import type { SavedState } from './emulator-state.js';
import { FaultControl } from './faults.js';

/** An answer the API gives instead of a result: HTTP status, error code and message. */
export class ApiError extends Error {
  constructor(readonly status: number, readonly code: ErrorCode, message: string) {
    super(message);
    this.name = 'ApiError';
  }
}

export type AgentRuntime = 'process' | 'docker' | 'auto';

export interface EmulatedCloudOptions {
  bootDelayMs: number;
  capacity: Record<GpuModel, number>;
  workDir: string;
  /** Boots an instance's agent: a process (the default), or a simulated one. */
  launchAgent: AgentLauncher;
  /** Also sell machines without GPUs (no capacity limit). */
  cpuOffers: boolean;
  log: (line: string) => void;
  /** Receives every instance and cluster after each change; given, the instances outlive close(), as a cloud's machines outlive a restart of its API. */
  save?: (state: Required<SavedState>) => void;
}

interface Machine {
  record: GpucloudInstance;
  offer: CatalogOffer;
  agentToken: string;
  workDir: string;
  /** From creation until its agent starts booting: the boot delay's timer, then 'queued' while every boot slot is taken. */
  pendingBoot: NodeJS.Timeout | 'queued' | null;
  booting: Promise<void> | null;
  agent: AgentProcess | null;
  agentExited: Promise<void> | null;
  lostReason: string | null;
  /** A running spot machine's interruption under the schedule (faults.spotInterruptionAfterMs). */
  interruption: NodeJS.Timeout | null;
}

const STOP_GRACE_MS = 5_000;
const MAX_CONCURRENT_BOOTS = Math.max(1, availableParallelism());
const HOLDS_CAPACITY: ReadonlySet<string> = new Set(['provisioning', 'running', 'terminating']);

/** The emulated cloud's instances: capacity, boot of an agent per instance, termination and failures. */
export class EmulatedCloud {
  readonly faults = new FaultControl({
    kill: (id) => this.kill(id),
    interrupt: (id) => this.interrupt(id),
    changed: () => this.faultsChanged(),
  });
  private readonly catalog: CatalogOffer[];
  private readonly machines = new Map<string, Machine>();
  private readonly byClientToken = new Map<string, Machine>();
  private readonly clusters = new Map<string, GpucloudCluster>();
  private readonly bootQueue: Machine[] = [];
  private activeBoots = 0;
  private closed = false;

  constructor(private readonly options: EmulatedCloudOptions) {
    this.catalog = buildCatalog({ cpu: options.cpuOffers });
  }

  /**
   * Takes back the instances a previous run of the emulator saved. Those whose agents still run are
   * kept; a running one whose agent died is failed and a terminating one terminated, as after a host
   * failure; one still provisioning boots anew.
   */
  restore({ instances: saved, clusters }: Required<SavedState>): void {
    for (const cluster of clusters) this.clusters.set(cluster.id, cluster);
    const offers = saved.map(({ record }) => {
      const offer = this.catalog.find((candidate) => candidate.id === record.offer_id);
      if (!offer) throw new Error(`saved instance ${record.id} has offer ${record.offer_id}, which the emulator does not sell`);
      return offer;
    });
    for (const [index, { record, agent_token: agentToken, agent_pid: pid, agent_start_time: startTime, work_dir: workDir }] of saved.entries()) {
      const machine = this.register({ record, offer: offers[index]!, agentToken, workDir });
      const agent = pid === null ? null : adoptAgent(pid, startTime);
      if (record.status === 'provisioning') {
        if (agent) {
          agent.release();
          agent.kill();
        }
        record.agent_url = null;
        this.scheduleBoot(machine);
      } else if (record.status === 'running' || record.status === 'terminating') {
        if (agent) {
          this.attach(machine, agent);
          if (record.status === 'terminating') void this.stopAgent(machine);
          else this.armInterruption(machine);
        } else {
          record.agent_url = null;
          if (record.status === 'running') this.setStatus(machine, 'failed', 'the machine stopped while the emulator was down');
          else this.setStatus(machine, 'terminated', record.status_reason);
        }
      }
    }
    this.save();
  }

  offers(): GpucloudOffer[] {
    return this.catalog.map((offer) => ({
      ...offer,
      availability: this.hasCapacity(offer.gpu.model) ? 'available' : 'unavailable',
    }));
  }

  /** Creates an instance, or returns the one created earlier with the same client_token (`created` false). */
  create(body: CreateInstanceBody): { instance: GpucloudInstance; created: boolean } {
    const earlier = this.byClientToken.get(body.client_token);
    if (earlier) {
      if (earlier.record.offer_id !== body.offer_id) {
        throw new ApiError(409, 'idempotency_mismatch',
          `client_token ${body.client_token} was already used for instance ${earlier.record.id} of offer ${earlier.record.offer_id}`);
      }
      return { instance: { ...earlier.record }, created: false };
    }
    const offer = this.offer(body.offer_id);
    if (!this.hasCapacity(offer.gpu.model)) {
      throw new ApiError(409, 'no_capacity', `no ${offer.gpu.model} capacity left in ${offer.region}`);
    }
    const cluster = body.cluster_id === undefined ? null : this.joinable(this.getCluster(body.cluster_id), offer);
    const now = new Date().toISOString();
    const id = `i-${randomBytes(8).toString('hex')}`;
    const machine = this.register({
      record: {
        id,
        name: body.name,
        client_token: body.client_token,
        offer_id: offer.id,
        status: 'provisioning',
        status_reason: null,
        agent_url: null,
        region: offer.region,
        gpu: { ...offer.gpu },
        price_per_hour: offer.price_per_hour,
        spot: offer.spot === true,
        ...(cluster ? { cluster_id: cluster.id, internal_ip: this.nextAddress(cluster) } : {}),
        created_at: now,
        updated_at: now,
      },
      offer,
      agentToken: body.agent.token,
      workDir: join(this.options.workDir, id),
    });
    this.scheduleBoot(machine);
    this.save();
    this.options.log(`instance ${machine.record.id} (${offer.id}) provisioning`);
    return { instance: { ...machine.record }, created: true };
  }

  /**
   * A placement group for `size` machines (or as many as a region holds) of the offer's GPU model in the offer's
   * region, or the one created earlier with the same client_token. Refused when `size` exceeds what one region holds.
   */
  createCluster(body: CreateClusterBody): { cluster: GpucloudCluster; created: boolean } {
    const offer = this.offer(body.offer_id);
    const earlier = [...this.clusters.values()].find((cluster) => cluster.client_token === body.client_token);
    if (earlier) {
      if (earlier.region !== offer.region || earlier.gpu_model !== offer.gpu.model) {
        throw new ApiError(409, 'idempotency_mismatch', `client_token ${body.client_token} was already used for cluster ${earlier.id} of ${earlier.gpu_model} in ${earlier.region}`);
      }
      return { cluster: { ...earlier }, created: false };
    }
    const size = body.size ?? null;
    const perRegion = this.perRegion(offer.gpu.model);
    if (size !== null && size > perRegion) {
      throw new ApiError(409, 'cluster_does_not_fit',
        `a cluster of ${size} ${offer.gpu.model} machines does not fit in one region: ${offer.region} holds at most ${perRegion}`);
    }
    const free = offer.gpu.model === NO_GPU_MODEL ? Infinity : this.options.capacity[offer.gpu.model] - this.used(offer.gpu.model);
    if (size !== null && size > free) {
      throw new ApiError(409, 'no_capacity', `a cluster of ${size} ${offer.gpu.model} machines does not fit now: ${Math.max(0, free)} are free`);
    }
    const cluster: GpucloudCluster = {
      id: `c-${randomBytes(8).toString('hex')}`, name: body.name, client_token: body.client_token, region: offer.region,
      gpu_model: offer.gpu.model, size, network: this.nextNetwork(), created_at: new Date().toISOString(),
    };
    this.clusters.set(cluster.id, cluster);
    this.save();
    this.options.log(`cluster ${cluster.id} (${size ?? 'any number of'} ${cluster.gpu_model} in ${cluster.region}) created`);
    return { cluster: { ...cluster }, created: true };
  }

  getCluster(id: string): GpucloudCluster {
    const cluster = this.clusters.get(id);
    if (!cluster) throw new ApiError(404, 'cluster_not_found', `cluster ${id} does not exist`);
    return { ...cluster };
  }

  listClusters(): GpucloudCluster[] {
    return [...this.clusters.values()].map((cluster) => ({ ...cluster }));
  }

  /** Deletes an empty cluster; one that still holds a live instance is refused. */
  deleteCluster(id: string): GpucloudCluster {
    const cluster = this.getCluster(id);
    const members = this.members(id);
    if (members.length > 0) throw new ApiError(409, 'cluster_in_use', `cluster ${id} still holds ${members.map((m) => m.record.id).join(', ')}`);
    this.clusters.delete(id);
    this.save();
    return cluster;
  }

  /** Each instance's bill by the cloud's own clock: from its creation until billing stopped, or until now. */
  usage(now = new Date()): UsageList {
    const usage = [...this.machines.values()].map(({ record }): InstanceUsage => {
      const until = record.billed_until ? new Date(record.billed_until) : now;
      const seconds = Math.max(0, (until.getTime() - new Date(record.created_at).getTime()) / 1000);
      return {
        instance_id: record.id, name: record.name, price_per_hour: record.price_per_hour, started_at: record.created_at,
        ended_at: record.billed_until ?? null, billed_seconds: seconds, dollars: (seconds * record.price_per_hour) / 3600,
      };
    });
    return { usage, total_dollars: usage.reduce((sum, u) => sum + u.dollars, 0) };
  }

  get(id: string): GpucloudInstance {
    return { ...this.machine(id).record };
  }

  list(): GpucloudInstance[] {
    return [...this.machines.values()].map((machine) => ({ ...machine.record }));
  }

  /** Starts termination and returns at once; the instance is terminated once its agent has exited. */
  terminate(id: string): GpucloudInstance {
    const machine = this.machine(id);
    const { status } = machine.record;
    if (status === 'provisioning' && this.cancelPendingBoot(machine)) {
      this.setStatus(machine, 'terminated', 'terminated by user');
    } else if (status === 'provisioning' || status === 'running') {
      this.setStatus(machine, 'terminating', 'terminated by user');
      if (machine.agent) void this.stopAgent(machine);
    }
    return { ...machine.record };
  }

  async kill(id: string): Promise<void> {
    const machine = this.machine(id);
    if (machine.booting) await machine.booting;
    if (machine.record.status !== 'running' || !machine.agent || !machine.agentExited) {
      throw new ApiError(409, 'instance_not_running', `instance ${id} is ${machine.record.status}, not running: nothing to kill`);
    }
    machine.lostReason = 'the machine stopped unexpectedly';
    machine.agent.kill();
    await machine.agentExited;
  }

  /** Takes a spot instance back, as a cloud does when it needs the capacity: its agent is killed and it ends terminated, `interrupted`. */
  async interrupt(id: string): Promise<void> {
    const machine = this.machine(id);
    if (!machine.record.spot) throw new ApiError(409, 'instance_not_spot', `instance ${id} runs on demand; only spot instances are interrupted`);
    if (machine.record.status !== 'provisioning' && machine.record.status !== 'running') {
      throw new ApiError(409, 'instance_not_running', `instance ${id} is ${machine.record.status}: nothing to interrupt`);
    }
    this.disarmInterruption(machine);
    machine.record.interrupted = true;
    const reason = 'interrupted: the cloud took its spot capacity back';
    if (this.cancelPendingBoot(machine)) {
      this.setStatus(machine, 'terminated', reason);
      return;
    }
    this.setStatus(machine, 'terminating', reason);
    if (machine.booting) await machine.booting;
    // The machine is powered off, not shut down: its jobs get no chance to report that they were stopped.
    if (machine.agent && machine.agentExited) {
      machine.agent.kill();
      await machine.agentExited;
    }
  }

  /** Stops every agent and cancels pending boots; with `save`, lets the agents run on and leaves pending boots to the next start. */
  async close(): Promise<void> {
    this.closed = true;
    for (const machine of this.machines.values()) this.disarmInterruption(machine);
    if (this.options.save) {
      for (const machine of this.machines.values()) this.cancelPendingBoot(machine);
      await Promise.all([...this.machines.values()].map((machine) => machine.booting));
      for (const machine of this.machines.values()) machine.agent?.release();
      this.save();
      return;
    }
    for (const machine of this.machines.values()) {
      if (this.cancelPendingBoot(machine)) this.setStatus(machine, 'terminated', 'the cloud shut down');
    }
    await Promise.all([...this.machines.values()].map(async (machine) => {
      if (machine.booting) await machine.booting;
      if (machine.agent && machine.agentExited) {
        if (machine.record.status === 'running') this.setStatus(machine, 'terminating', 'the cloud shut down');
        await this.stopAgent(machine);
      }
    }));
  }

  capacityState(): Record<string, { limit: number; used: number }> {
    const state: Record<string, { limit: number; used: number }> = {};
    for (const model of Object.keys(GPU_SHAPES) as GpuModel[]) {
      state[model] = { limit: this.options.capacity[model], used: this.used(model) };
    }
    return state;
  }

  agentPid(id: string): number | null {
    return this.machine(id).agent?.pid ?? null;
  }

  private register(parts: Pick<Machine, 'record' | 'offer' | 'agentToken' | 'workDir'>): Machine {
    const machine: Machine = { ...parts, pendingBoot: null, booting: null, agent: null, agentExited: null, lostReason: null, interruption: null };
    this.machines.set(machine.record.id, machine);
    this.byClientToken.set(machine.record.client_token, machine);
    return machine;
  }

  private scheduleBoot(machine: Machine): void {
    machine.pendingBoot = setTimeout(() => {
      machine.pendingBoot = 'queued';
      this.bootQueue.push(machine);
      this.startQueuedBoots();
    }, this.options.bootDelayMs);
  }

  private save(): void {
    this.options.save?.({
      instances: [...this.machines.values()].map((machine) => ({
        record: machine.record,
        agent_token: machine.agentToken,
        agent_pid: machine.agent?.pid ?? null,
        agent_start_time: machine.agent?.startTime ?? null,
        work_dir: machine.workDir,
      })),
      clusters: [...this.clusters.values()],
    });
  }

  private offer(id: string): CatalogOffer {
    const offer = this.catalog.find((candidate) => candidate.id === id);
    if (!offer) throw new ApiError(404, 'offer_not_found', `offer ${id} does not exist`);
    return offer;
  }

  /** The machines of one model that one region holds: the model's capacity shared among the regions. */
  private perRegion(model: string): number {
    return model === NO_GPU_MODEL ? Infinity : Math.ceil(this.options.capacity[model as GpuModel] / REGIONS.length);
  }

  private members(clusterId: string): Machine[] {
    return [...this.machines.values()].filter((machine) => machine.record.cluster_id === clusterId && HOLDS_CAPACITY.has(machine.record.status));
  }

  /** The cluster, when an instance of `offer` may join it: the same region and model, and room left. */
  private joinable(cluster: GpucloudCluster, offer: CatalogOffer): GpucloudCluster {
    if (cluster.region !== offer.region || cluster.gpu_model !== offer.gpu.model) {
      throw new ApiError(409, 'cluster_mismatch', `cluster ${cluster.id} holds ${cluster.gpu_model} machines in ${cluster.region}; offer ${offer.id} is ${offer.gpu.model} in ${offer.region}`);
    }
    const room = Math.min(cluster.size ?? Infinity, this.perRegion(cluster.gpu_model));
    if (this.members(cluster.id).length >= room) {
      throw new ApiError(409, 'cluster_does_not_fit', `cluster ${cluster.id} is full: it holds ${room} ${cluster.gpu_model} machines`);
    }
    return cluster;
  }

  /** A loopback network of its own per cluster, so that its instances' internal addresses reach their jobs on this machine. */
  private nextNetwork(): string {
    const used = [...this.clusters.values()].map((cluster) => Number(cluster.network.split('.')[2]));
    const free = Array.from({ length: 254 }, (_, index) => index + 1).find((octet) => !used.includes(octet));
    if (free === undefined) throw new ApiError(409, 'cluster_does_not_fit', 'the emulator holds at most 254 clusters; delete one');
    return `127.64.${free}.0/24`;
  }

  /** The next address of the cluster's network; addresses are never reused within a cluster. */
  private nextAddress(cluster: GpucloudCluster): string {
    const taken = [...this.machines.values()].filter((machine) => machine.record.cluster_id === cluster.id).length;
    return cluster.network.replace(/\.0\/24$/, `.${taken + 1}`);
  }

  private machine(id: string): Machine {
    const machine = this.machines.get(id);
    if (!machine) throw new ApiError(404, 'instance_not_found', `instance ${id} does not exist`);
    return machine;
  }

  private used(model: string): number {
    let used = 0;
    for (const machine of this.machines.values()) {
      if (machine.offer.gpu.model === model && HOLDS_CAPACITY.has(machine.record.status)) used += 1;
    }
    return used;
  }

  private hasCapacity(model: CatalogOffer['gpu']['model']): boolean {
    return !this.faults.isSoldOut(model) && (model === NO_GPU_MODEL || this.used(model) < this.options.capacity[model]);
  }

  /** Agents boot a few at a time, as many as there are CPUs: a burst of creates must not starve every boot of CPU. */
  private startQueuedBoots(): void {
    while (this.activeBoots < MAX_CONCURRENT_BOOTS && this.bootQueue.length > 0) {
      const machine = this.bootQueue.shift()!;
      machine.pendingBoot = null;
      machine.booting = this.boot(machine);
    }
  }

  private cancelPendingBoot(machine: Machine): boolean {
    if (machine.pendingBoot === null) return false;
    if (machine.pendingBoot === 'queued') this.bootQueue.splice(this.bootQueue.indexOf(machine), 1);
    else clearTimeout(machine.pendingBoot);
    machine.pendingBoot = null;
    return true;
  }

  private async boot(machine: Machine): Promise<void> {
    const { id } = machine.record;
    this.activeBoots += 1;
    try {
      await mkdir(machine.workDir, { recursive: true });
      await this.writeGpuUtilization(machine);
      const { agent, url } = await this.options.launchAgent({ token: machine.agentToken, instanceId: id, offer: machine.offer, workDir: machine.workDir });
      this.attach(machine, agent);
      if (machine.record.status === 'provisioning' && (!this.closed || this.options.save)) {
        machine.record.agent_url = url;
        this.setStatus(machine, 'running', null);
        this.armInterruption(machine);
        this.options.log(`instance ${id} running, agent at ${url}`);
      } else {
        await this.stopAgent(machine);
      }
    } catch (error) {
      if (machine.record.status === 'provisioning') {
        this.setStatus(machine, 'failed', `the machine failed to boot: ${(error as Error).message}`);
      } else {
        this.setStatus(machine, 'terminated', machine.record.status_reason);
      }
    } finally {
      machine.booting = null;
      this.activeBoots -= 1;
      this.startQueuedBoots();
    }
  }

  /** From here the machine lives as long as its agent: when the agent ends, so does the machine (its disk too, unless it failed). */
  private attach(machine: Machine, agent: AgentProcess): void {
    machine.agent = agent;
    machine.agentExited = agent.exited.then(async (how) => {
      this.onAgentExit(machine, how);
      if (machine.record.status !== 'terminated') return;
      // A terminated machine's disk is gone; a failed one's stays for a post-mortem.
      await rm(machine.workDir, { recursive: true, force: true })
        .catch((error: Error) => this.options.log(`cannot remove ${machine.workDir}: ${error.message}`));
    });
  }

  /** Under the spot interruption schedule, a running spot machine is interrupted that long after it started, or after the schedule changed. */
  private armInterruption(machine: Machine): void {
    this.disarmInterruption(machine);
    const after = this.faults.spotInterruptionAfterMs;
    if (!machine.record.spot || machine.record.status !== 'running' || after === null || this.closed) return;
    machine.interruption = setTimeout(() => {
      machine.interruption = null;
      this.interrupt(machine.record.id).catch((error: Error) => this.options.log(`cannot interrupt ${machine.record.id}: ${error.message}`));
    }, after);
  }

  private disarmInterruption(machine: Machine): void {
    if (machine.interruption) clearTimeout(machine.interruption);
    machine.interruption = null;
  }

  private faultsChanged(): void {
    for (const machine of this.machines.values()) {
      this.armInterruption(machine);
      if (machine.record.status === 'running') {
        this.writeGpuUtilization(machine).catch((error: Error) => this.options.log(`cannot set the GPU utilisation of ${machine.record.id}: ${error.message}`));
      }
    }
  }

  /** What the machine's agent reports as its GPUs' utilisation (agent/metrics.ts reads this file). */
  private async writeGpuUtilization(machine: Machine): Promise<void> {
    const file = join(machine.workDir, DECLARED_GPU_UTILIZATION_FILE);
    const percent = this.faults.gpuUtilization;
    if (percent === null) await rm(file, { force: true });
    else await writeFile(file, `${percent}\n`);
  }

  private async stopAgent(machine: Machine): Promise<void> {
    if (!machine.agent || !machine.agentExited) return;
    await machine.agent.stop(STOP_GRACE_MS);
    await machine.agentExited;
  }

  private onAgentExit(machine: Machine, how: string): void {
    machine.record.agent_url = null;
    this.disarmInterruption(machine);
    if (machine.record.status === 'terminating' || this.closed) {
      this.setStatus(machine, 'terminated', machine.record.status_reason);
      return;
    }
    if (machine.record.status !== 'running') return;
    this.setStatus(machine, 'failed', machine.lostReason ?? `the instance's agent exited on its own (${how})`);
  }

  private setStatus(machine: Machine, status: GpucloudInstance['status'], reason: string | null): void {
    machine.record.status = status;
    machine.record.status_reason = reason;
    machine.record.updated_at = new Date().toISOString();
    if (status !== 'provisioning' && status !== 'running') machine.record.billed_until ??= machine.record.updated_at;
    this.save();
    if (status !== 'provisioning' && status !== 'running') {
      this.options.log(`instance ${machine.record.id} ${status}${reason ? `: ${reason}` : ''}`);
    }
  }
}
