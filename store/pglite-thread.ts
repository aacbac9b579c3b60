import { existsSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { Worker } from 'node:worker_threads';

export interface ThreadStart {
  dataDir: string | undefined;
  settings: string[];
}

/**
 * The thread's young generation, against V8's 16 MB: what it allocates (each answer's bytes, handed over) dies at
 * once, and the 14 MB saved are 14 MB of the server's footprint, with statements no slower (bench/README.md, "The
 * embedded database's memory at a fresh start").
 */
const WORKER_YOUNG_GENERATION_MB = 2;

/** What the worker is started with: PGlite's WebAssembly, compiled once in this process for every thread. */
export interface ThreadData extends ThreadStart {
  pgliteWasmModule: WebAssembly.Module;
  initdbWasmModule: WebAssembly.Module;
}

export type ThreadRequest = { id: number; close?: false; message: Uint8Array; syncToFs: boolean } | { id: number; close: true };

/** `id` 0 answers the start. */
export type ThreadReply = { id: number; answer: Uint8Array | null } | { id: number; error: string };

/**
 * The embedded database, run in a thread of its own (store/pglite-worker.ts). PGlite executes each statement
 * synchronously in the thread that holds it; held in the server's thread, the server's work and the database's took
 * turns on one core. Here the server's thread only sends the protocol's bytes and reads the answer's.
 */
export class PgliteThread {
  private readonly pending = new Map<number, { resolve: (answer: Buffer) => void; reject: (error: Error) => void }>();
  private nextId = 1;
  /** Why the thread is gone: every statement after that fails with it at once, none waits for an answer that cannot come. */
  private ended: Error | undefined;

  private constructor(private readonly worker: Worker) {
    worker.on('message', (reply: ThreadReply) => this.settle(reply));
    worker.on('error', (error) => this.end(new Error(`the embedded database's thread failed: ${error.message}; restart the server`)));
    worker.on('exit', (code) => this.end(new Error(`the embedded database's thread ended (exit ${code}); restart the server`)));
  }

  /** Starts the thread and waits until PGlite has opened `dataDir` (memory when undefined). */
  static async start(start: ThreadStart): Promise<PgliteThread> {
    const worker = new Worker(workerScript(), {
      workerData: { ...start, ...await compiledModules() } satisfies ThreadData,
      eval: true,
      resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
    });
    const thread = new PgliteThread(worker);
    try {
      await new Promise<Buffer>((resolve, reject) => thread.waitFor(0, resolve, reject));
    } catch (error) {
      await worker.terminate();
      throw error;
    }
    return thread;
  }

  /** Runs protocol messages and answers with the bytes the database wrote; `syncToFs` when they ended a transaction. */
  run(message: Uint8Array, syncToFs: boolean): Promise<Buffer> {
    return this.send({ id: this.nextId++, message, syncToFs });
  }

  /** Closes the database and ends the thread; a thread already gone has nothing left to close. */
  async close(): Promise<void> {
    if (!this.ended) await this.send({ id: this.nextId++, close: true });
    this.ended ??= new Error('the embedded database is closed');
    await this.worker.terminate();
  }

  private send(request: ThreadRequest): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      if (this.ended) return reject(this.ended);
      this.waitFor(request.id, resolve, reject);
      this.worker.postMessage(request);
    });
  }

  /** The thread keeps the process alive only while an answer is awaited, as a socket with a query in flight would. */
  private waitFor(id: number, resolve: (answer: Buffer) => void, reject: (error: Error) => void): void {
    if (this.pending.size === 0) this.worker.ref();
    this.pending.set(id, { resolve, reject });
  }

  private settle(reply: ThreadReply): void {
    const waiter = this.pending.get(reply.id);
    if (!waiter) return;
    this.pending.delete(reply.id);
    if (this.pending.size === 0) this.worker.unref();
    if ('error' in reply) waiter.reject(new Error(reply.error));
    else waiter.resolve(reply.answer ? Buffer.from(reply.answer.buffer, reply.answer.byteOffset, reply.answer.byteLength) : Buffer.alloc(0));
  }

  private end(error: Error): void {
    this.ended ??= error;
    for (const waiter of this.pending.values()) waiter.reject(error);
    this.pending.clear();
    this.worker.unref();
  }
}

const packages = createRequire(import.meta.url);

let compiled: Promise<Pick<ThreadData, 'pgliteWasmModule' | 'initdbWasmModule'>> | undefined;

/**
 * PGlite's two WebAssembly modules (the database, and initdb for a new one), compiled at the first start. V8 compiles
 * a module's hot functions again, optimised, on as many background threads as it has; the memory each thread
 * compiled in stays in that thread's malloc arena once freed, 10–18 MB of the server's footprint at a fresh start.
 * One compiling thread reuses its own (bench/README.md, "The embedded database's memory at a fresh start").
 */
function compiledModules(): Promise<Pick<ThreadData, 'pgliteWasmModule' | 'initdbWasmModule'>> {
  compiled ??= (async () => {
    setFlagsFromString('--wasm-num-compilation-tasks=1');
    const [pgliteWasmModule, initdbWasmModule] = await Promise.all(['pglite.wasm', 'initdb.wasm'].map(async (name) =>
      WebAssembly.compile(await readFile(join(dirname(packages.resolve('@electric-sql/pglite')), name)))));
    return { pgliteWasmModule: pgliteWasmModule!, initdbWasmModule: initdbWasmModule! };
  })();
  return compiled;
}

/**
 * The worker's code: an import of its built module when there is one, else of its source with tsx's loader
 * registered in the thread first (a worker does not take this process's).
 */
function workerScript(): string {
  const built = new URL('./pglite-worker.js', import.meta.url);
  if (existsSync(fileURLToPath(built))) return `import(${JSON.stringify(built.href)})`;
  const source = new URL('./pglite-worker.ts', import.meta.url).href;
  return `import(${JSON.stringify(tsxApi())}).then((api) => { api.register(); return import(${JSON.stringify(source)}); })`;
}

/** tsx's API as an ES module; read from its package's exports, as this module may itself have been loaded as CommonJS. */
function tsxApi(): string {
  const manifest = packages.resolve('tsx/package.json');
  const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as { exports: Record<string, { import: { default: string } }> };
  return pathToFileURL(join(dirname(manifest), exports['./esm/api']!.import.default)).href;
}
