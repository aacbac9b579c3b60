/**
 * The scale benchmark's API client (bench/scale.ts), run in a thread of its own: `ps`, `logs` of a random running task,
 * then `apply` of a short task, in turn, until the window is over and each has its samples. In the benchmark's main
 * thread it shared the event loop with a thousand simulated agents, and an answer waited there for their work before it
 * was read: the server had sent its slowest run list in 161 ms when the client counted 431 ms. A user's
 * `orchestrator ps` is a process of its own.
 */
import { parentPort, Worker, workerData } from 'node:worker_threads';
import { projectApi } from './project-api.js';

export interface ProbeWindow {
  url: string;
  token: string;
  windowMs: number;
  samples: number;
  /** Running tasks whose logs are read. */
  names: string[];
  /** Names the applied tasks apart from another level's. */
  level: number;
}

export interface ProbeFigures {
  ps: number[];
  logs: number[];
  apply: number[];
  psAnswer: { runs: number; bytes: number };
}

/** Runs the probes of one window in a new thread and resolves with their times (ms). */
export function probeApi(window: ProbeWindow): Promise<ProbeFigures> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL(import.meta.url), { workerData: window });
    worker.once('message', resolve);
    worker.once('error', reject);
    worker.once('exit', (code) => reject(new Error(`the API probes' thread ended with ${code} before it answered`)));
  });
}

async function probe({ url, token, windowMs, samples, names, level }: ProbeWindow): Promise<ProbeFigures> {
  const call = async (method: string, path: string, body?: unknown) => {
    const started = performance.now();
    const { status, text } = await projectApi(url, token, method, path, body);
    if (status >= 300) throw new Error(`${method} ${path}: ${status} ${text.slice(0, 200)}`);
    return { ms: performance.now() - started, text };
  };
  const figures: ProbeFigures = { ps: [], logs: [], apply: [], psAnswer: { runs: 0, bytes: 0 } };
  let lastList = '[]';
  const started = Date.now();
  for (let probe = 0; Date.now() - started < windowMs || figures.ps.length < samples; probe++) {
    const listed = await call('GET', '/runs');
    figures.ps.push(listed.ms);
    lastList = listed.text;
    figures.logs.push((await call('GET', `/runs/${names[Math.floor(Math.random() * names.length)]}/logs`)).ms);
    figures.apply.push((await call('POST', '/runs/apply', { spec: { type: 'task', name: `probe-${level}-${probe}`, commands: ['echo probe'] } })).ms);
    await new Promise((wake) => setTimeout(wake, Math.max(0, windowMs / samples - 50)));
  }
  // The answer's size is printed once, so one list (the last) is parsed, not each one in the window.
  figures.psAnswer = { runs: (JSON.parse(lastList) as unknown[]).length, bytes: Buffer.byteLength(lastList) };
  return figures;
}

if (parentPort && workerData?.url) parentPort.postMessage(await probe(workerData as ProbeWindow));
