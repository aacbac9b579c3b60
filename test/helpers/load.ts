/** A steady stream of requests from a few workers, counting what came back, until stopped. */
export interface Load {
  /** Answers by status (0: the request itself failed). */
  readonly statuses: Map<number, number>;
  readonly failures: string[];
  sent(): number;
  stop(): Promise<void>;
}

export interface LoadOptions {
  token?: string;
  workers?: number;
  pauseMs?: number;
  init?: RequestInit;
  /** A successful answer whose body does not match is a failure too: it came from the wrong replica. */
  expectBody?: RegExp;
}

export function startLoad(url: string, options: LoadOptions = {}): Load {
  const statuses = new Map<number, number>();
  const failures: string[] = [];
  let running = true;
  let count = 0;
  const worker = async () => {
    while (running) {
      count += 1;
      let status = 0;
      try {
        const response = await fetch(url, {
          ...options.init,
          headers: { ...(options.token ? { authorization: `Bearer ${options.token}` } : {}), ...(options.init?.headers as Record<string, string> | undefined) },
        });
        status = response.status;
        const text = await response.text();
        if (status >= 300 || (options.expectBody && !options.expectBody.test(text))) failures.push(`${status} ${text.slice(0, 200)}`);
      } catch (error) {
        failures.push(`request failed: ${(error as Error).message}`);
      }
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
      if (options.pauseMs) await new Promise((r) => setTimeout(r, options.pauseMs));
    }
  };
  const workers = Array.from({ length: options.workers ?? 4 }, worker);
  return {
    statuses,
    failures,
    sent: () => count,
    stop: async () => {
      running = false;
      await Promise.all(workers);
    },
  };
}
