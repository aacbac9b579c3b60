import { randomBytes, randomUUID } from 'node:crypto';
import type { JobState, JobStatus, JobSubmission, LogEntry } from '../../api/agent.js';
import type { AgentClient } from '../../agent/client.js';

export function randomToken(): string {
  return randomBytes(24).toString('hex');
}

export function submission(overrides: Partial<JobSubmission> = {}): JobSubmission {
  return {
    jobId: `job-${randomUUID()}`,
    runName: 'test-run',
    commands: [],
    env: {},
    files: [],
    ports: [],
    gpus: 0,
    ...overrides,
  };
}

export async function waitForState(client: AgentClient, jobId: string, states: readonly JobState[], timeoutMs = 10_000): Promise<JobStatus> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const status = await client.job(jobId);
    if (states.includes(status.state)) return status;
    if (Date.now() > deadline) throw new Error(`job ${jobId} still ${status.state} after ${timeoutMs} ms, expected ${states.join('|')}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

/** Follows a job's log through long-polls until the agent says it is finished. */
export async function collectLogs(client: AgentClient, jobId: string, timeoutMs = 20_000): Promise<LogEntry[]> {
  const deadline = Date.now() + timeoutMs;
  const entries: LogEntry[] = [];
  let after = 0;
  for (;;) {
    const page = await client.logs(jobId, after, 2000);
    entries.push(...page.entries);
    after = page.next;
    if (page.finished) return entries;
    if (Date.now() > deadline) throw new Error(`log of ${jobId} not finished after ${timeoutMs} ms`);
  }
}

/** Waits until the job's log holds a line with `text`. */
export async function waitForLine(client: AgentClient, jobId: string, text: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let after = 0;
  let finished = false;
  const printed: string[] = [];
  while (Date.now() < deadline) {
    const page = await client.logs(jobId, after, 1000);
    if (page.entries.some((entry) => entry.text === text)) return;
    printed.push(...page.entries.map((entry) => entry.text));
    if ((finished = page.finished)) break;
    after = page.next;
  }
  const job = await client.job(jobId);
  const state = finished ? `${job.state}, exit code ${job.exitCode}${job.reason ? `, ${job.reason}` : ''}` : `still running after ${timeoutMs} ms`;
  throw new Error(`job ${jobId} never printed "${text}": ${state}; its last lines: ${JSON.stringify(printed.slice(-10))}`);
}

export function base64(text: string): string {
  return Buffer.from(text).toString('base64');
}
