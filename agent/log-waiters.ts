/** Readers waiting for a log to grow: each waits until woken or until its time runs out, whichever comes first. */
export class LogWaiters {
  private readonly waiting = new Set<() => void>();

  wait(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waiting.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waiting.add(done);
    });
  }

  wakeAll(): void {
    for (const done of [...this.waiting]) done();
  }
}
