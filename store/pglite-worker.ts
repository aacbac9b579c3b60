/**
 * The embedded database's thread (store/pglite-thread.ts says why it has one): it opens PGlite and runs the protocol
 * messages it is sent, one request at a time in the order they came, answering each with the raw bytes PGlite wrote.
 */
import { PGlite } from '@electric-sql/pglite';
import { parentPort, workerData } from 'node:worker_threads';
import type { ThreadData, ThreadReply, ThreadRequest } from './pglite-thread.js';

const { dataDir, settings, pgliteWasmModule, initdbWasmModule } = workerData as ThreadData;
const port = parentPort!;

const opened = PGlite.create(dataDir, {
  startParams: [...PGlite.defaultStartParams, ...settings.flatMap((s) => ['-c', s])], pgliteWasmModule, initdbWasmModule,
});
opened.then(() => port.postMessage({ id: 0, answer: null } satisfies ThreadReply), (error: unknown) => fail(0, error));

let queue = Promise.resolve();
port.on('message', (request: ThreadRequest) => {
  queue = queue.then(() => serve(request));
});

async function serve(request: ThreadRequest): Promise<void> {
  try {
    const pg = await opened;
    if (request.close) {
      await pg.close();
      port.postMessage({ id: request.id, answer: null } satisfies ThreadReply);
      return;
    }
    const chunks: Uint8Array[] = [];
    await pg.execProtocolRawStream(request.message, { syncToFs: false, onRawData: (data) => chunks.push(data.slice()) });
    if (request.syncToFs) await pg.syncToFs();
    const answer = chunks.length === 1 ? chunks[0]! : joined(chunks);
    port.postMessage({ id: request.id, answer } satisfies ThreadReply, [answer.buffer as ArrayBuffer]);
  } catch (error) {
    fail(request.id, error);
  }
}

/** The chunks in one array of their own, which can be handed over without a copy. */
function joined(chunks: Uint8Array[]): Uint8Array {
  const answer = new Uint8Array(chunks.reduce((length, chunk) => length + chunk.length, 0));
  let at = 0;
  for (const chunk of chunks) {
    answer.set(chunk, at);
    at += chunk.length;
  }
  return answer;
}

function fail(id: number, error: unknown): void {
  port.postMessage({ id, error: error instanceof Error ? error.message : String(error) } satisfies ThreadReply);
}
