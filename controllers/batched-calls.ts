/**
 * Calls of one batch function, gathered: the calls made in one turn of the event loop, or while the previous batch is
 * still being made, go out together in the next batch. The run-watch loop's instances answer at different moments and
 * each wants the same statements (its runs read, its lines stored, its leases given back); gathered, the database sees
 * one statement where it saw one an instance, and the busier it is, the larger each batch grows.
 * One batch is in flight at a time. Calls with the same `key` never share a batch (a statement that writes a run's
 * row at most once); the later one waits for the next.
 */
export class BatchedCalls<In, Out> {
  private waiting: Array<{ input: In; resolve: (output: Out) => void; reject: (error: unknown) => void }> = [];
  private scheduled = false;
  private inFlight = false;

  /** `batch` answers the inputs in their order. */
  constructor(private readonly batch: (inputs: In[]) => Promise<Out[]>, private readonly key: (input: In) => string) {}

  call(input: In): Promise<Out> {
    const output = new Promise<Out>((resolve, reject) => this.waiting.push({ input, resolve, reject }));
    this.schedule();
    return output;
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight || this.waiting.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.inFlight = true;
    const keys = new Set<string>();
    const taken: typeof this.waiting = [];
    const left: typeof this.waiting = [];
    for (const call of this.waiting) {
      const key = this.key(call.input);
      if (keys.has(key)) left.push(call);
      else {
        keys.add(key);
        taken.push(call);
      }
    }
    this.waiting = left;
    try {
      const outputs = await this.batch(taken.map((call) => call.input));
      taken.forEach((call, index) => call.resolve(outputs[index] as Out));
    } catch (error) {
      for (const call of taken) call.reject(error);
    } finally {
      this.inFlight = false;
      this.schedule();
    }
  }
}

/** Reads of one row by id, gathered into reads of many ids that answer by id; an id the read did not find gives undefined. */
export function batchedReads<Out>(read: (ids: string[]) => Promise<Map<string, Out>>): BatchedCalls<string, Out | undefined> {
  return new BatchedCalls(async (ids) => {
    const found = await read(ids);
    return ids.map((id) => found.get(id));
  }, (id) => id);
}
