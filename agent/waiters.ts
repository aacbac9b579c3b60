/** Callers waiting for something to happen (a log to grow, a job to change state): each waits until woken or until its time runs out, whichever comes first. */
export class Waiters {
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
