/**
 * Wraps a task so that calls while it runs make one more run after it, shared by all of them: every call's
 * promise settles after a run that started after the call, and there is never more than one waiting.
 * The task must not reject.
 */
export function coalesced(task: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | null = null;
  let queued: Promise<void> | null = null;
  const run = (): Promise<void> => {
    running = task().finally(() => { running = null; });
    return running;
  };
  return () => {
    if (!running) return run();
    queued ??= running.then(() => {
      queued = null;
      return run();
    });
    return queued;
  };
}
