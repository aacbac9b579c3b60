interface PipeHandle {
  setBlocking?: (blocking: boolean) => number;
}

/**
 * Makes writes to stdout and stderr wait until the kernel has taken them, as they already do on a
 * terminal. Node writes to a pipe asynchronously and, once the pipe is full, queues each stream on
 * its own: with `2>&1` into a reader slower than the output (`| less`, a busy log shipper) the two
 * queues drain in any order, and an error could show after the line that answered it.
 */
export function writeOutputInOrder(): void {
  for (const stream of [process.stdout, process.stderr]) {
    if (stream.isTTY) continue;
    (stream as unknown as { _handle?: PipeHandle })._handle?.setBlocking?.(true);
  }
}
