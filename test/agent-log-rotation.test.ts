import { expect } from 'chai';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient } from '../agent/client.js';
import { startAgent, type RunningAgent } from '../agent/server.js';
import { collectLogs, randomToken, submission, waitForState } from './helpers/agent-jobs.js';

describe('agent log files', function () {
  this.timeout(30_000);
  const MAX_LOG_BYTES = 1024 * 1024;
  let workDir: string;
  let agent: RunningAgent;
  let client: AgentClient;

  before(async () => {
    workDir = mkdtempSync(join(tmpdir(), 'orch-agent-rotation-'));
    const token = randomToken();
    agent = await startAgent({ token, runtime: 'process', gpu: 'none', workDir, maxLogBytes: MAX_LOG_BYTES });
    client = new AgentClient(agent.url, token);
  });
  after(async () => {
    await agent.close();
    rmSync(workDir, { recursive: true, force: true });
  });

  it('stay under --max-log-size: the oldest lines go, the newest stay readable and numbered without gaps', async () => {
    const job = submission({ commands: ['seq 1 200000'] });
    await client.submit(job);
    await waitForState(client, job.jobId, ['exited']);
    const files = readdirSync(join(workDir, 'jobs', job.jobId)).filter((name) => name.startsWith('log.jsonl'));
    const onDisk = files.reduce((sum, name) => sum + statSync(join(workDir, 'jobs', job.jobId, name)).size, 0);
    expect(onDisk).to.be.at.most(MAX_LOG_BYTES);
    expect(files.length).to.be.greaterThan(1);

    const entries = await collectLogs(client, job.jobId);
    const first = entries[0]!.seq;
    expect(first).to.be.greaterThan(1);
    expect(entries.map((e) => e.seq)).to.deep.equal(Array.from({ length: 200_000 - first + 1 }, (_, i) => first + i));
    expect(entries.map((e) => e.text)).to.deep.equal(entries.map((e) => String(e.seq)));
  });

  it('serve the same page as JSON and as JSON lines', async () => {
    const job = submission({ commands: ['seq 1 3', 'sleep 0.3', 'echo err >&2'] });
    await client.submit(job);
    await waitForState(client, job.jobId, ['exited']);
    const page = await client.logs(job.jobId, 1);
    const lines = await client.logLines(job.jobId, 1);
    expect(lines).to.include({ first: 2, next: 4, count: 3, finished: true });
    expect(lines.jsonLines.split('\n').map((line) => JSON.parse(line))).to.deep.equal(page.entries);
    expect(page.entries.map((e) => [e.stream, e.text])).to.deep.equal([['stdout', '2'], ['stdout', '3'], ['stderr', 'err']]);
  });
});
