import type { FaultsPatch, FaultsState } from './api.js';

export type CallFault = 'rate_limit' | 'api_error';

/** What the faults act on: the emulated cloud's instances. */
export interface FaultTargets {
  /** Kills the instance's agent as if its machine vanished; resolves once the instance is failed. */
  kill(instanceId: string): Promise<void>;
  /** Takes a spot instance back; resolves once it is terminated. */
  interrupt(instanceId: string): Promise<void>;
  /** The spot interruption schedule or the GPU utilisation changed. */
  changed(): void;
}

/** Faults the emulator injects into its API and its instances, for tests and demos of failure handling. */
export class FaultControl {
  /** GPU models whose creates fail with 409 no_capacity; '*' means every model. */
  readonly noCapacity = new Set<string>();
  /** The next N API calls answer 500. */
  apiErrors = 0;
  /** Every API answer is delayed by this many milliseconds. */
  slowMs = 0;
  /** The next N API calls answer 429 with Retry-After: 1. */
  rateLimit = 0;
  /** Spot instances are interrupted this long after they start running; null: never. */
  spotInterruptionAfterMs: number | null = null;
  /** The utilisation, in percent, every instance's GPUs report; null: idle. */
  gpuUtilization: number | null = null;

  constructor(private readonly targets: FaultTargets) {}

  /** Kills the instance's agent as if its machine vanished; resolves once the instance is failed. */
  killInstance(instanceId: string): Promise<void> {
    return this.targets.kill(instanceId);
  }

  /** Takes a spot instance back as the cloud would; resolves once it is terminated. */
  interruptInstance(instanceId: string): Promise<void> {
    return this.targets.interrupt(instanceId);
  }

  isSoldOut(model: string): boolean {
    return this.noCapacity.has('*') || this.noCapacity.has(model);
  }

  /** Consumes the fault, if any, that the next API call must answer with. */
  takeCallFault(): CallFault | null {
    if (this.rateLimit > 0) {
      this.rateLimit -= 1;
      return 'rate_limit';
    }
    if (this.apiErrors > 0) {
      this.apiErrors -= 1;
      return 'api_error';
    }
    return null;
  }

  async apply(patch: FaultsPatch): Promise<void> {
    if (patch.no_capacity) {
      this.noCapacity.clear();
      for (const model of patch.no_capacity) this.noCapacity.add(model);
    }
    if (patch.api_errors !== undefined) this.apiErrors = patch.api_errors;
    if (patch.slow_ms !== undefined) this.slowMs = patch.slow_ms;
    if (patch.rate_limit !== undefined) this.rateLimit = patch.rate_limit;
    if (patch.spot_interruption_after_ms !== undefined) this.spotInterruptionAfterMs = patch.spot_interruption_after_ms;
    if (patch.gpu_utilization !== undefined) this.gpuUtilization = patch.gpu_utilization;
    if (patch.spot_interruption_after_ms !== undefined || patch.gpu_utilization !== undefined) this.targets.changed();
    await Promise.all([
      ...(patch.kill_instances ?? []).map((id) => this.killInstance(id)),
      ...(patch.interrupt_instances ?? []).map((id) => this.interruptInstance(id)),
    ]);
  }

  state(): FaultsState {
    return {
      no_capacity: [...this.noCapacity].sort(),
      api_errors: this.apiErrors,
      slow_ms: this.slowMs,
      rate_limit: this.rateLimit,
      spot_interruption_after_ms: this.spotInterruptionAfterMs,
      gpu_utilization: this.gpuUtilization,
    };
  }
}
