import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { chmodSync, copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient } from '../agent/client.js';
import { detectGpus, gpuUsage } from '../agent/gpu.js';
import { startAgent } from '../agent/server.js';

const FIXTURES = join(import.meta.dirname, 'fixtures', 'nvidia-smi');
const DETECT_QUERY = 'name,memory.total';
const USAGE_QUERY = 'index,name,utilization.gpu,memory.used,memory.total';
const H100 = 'NVIDIA H100 80GB HBM3';

/**
 * An nvidia-smi on PATH that answers each --query-gpu with the output the real one gave on an H100 for it
 * (test/fixtures/nvidia-smi, recorded idle and under a matrix-product load), and refuses other arguments, so
 * that the agent's exact command lines are checked too.
 */
function fakeNvidiaSmi(usage: 'idle' | 'busy'): { bin: string; restore: () => void } {
  const bin = mkdtempSync(join(tmpdir(), 'nvidia-smi-'));
  copyFileSync(join(FIXTURES, 'h100-name-memory.csv'), join(bin, `${DETECT_QUERY}.csv`));
  copyFileSync(join(FIXTURES, `h100-usage-${usage}.csv`), join(bin, `${USAGE_QUERY}.csv`));
  writeFileSync(join(bin, 'nvidia-smi'), [
    '#!/bin/sh',
    '[ "$#" -eq 2 ] && [ "$2" = "--format=csv,noheader,nounits" ] || { echo "unexpected arguments: $*" >&2; exit 2; }',
    'exec cat "$(dirname "$0")/${1#--query-gpu=}.csv"',
    '',
  ].join('\n'));
  chmodSync(join(bin, 'nvidia-smi'), 0o755);
  const path = process.env.PATH;
  process.env.PATH = `${bin}:${path}`;
  return { bin, restore: () => { process.env.PATH = path; rmSync(bin, { recursive: true, force: true }); } };
}

describe('GPUs from nvidia-smi, as an H100 answered', function () {
  this.timeout(30_000);

  it('detects the card with its memory in MiB, one GPU per line', async () => {
    const smi = fakeNvidiaSmi('idle');
    try {
      expect(await detectGpus()).to.deep.equal({ name: H100, memoryMib: 81559, count: 1 });
    } finally {
      smi.restore();
    }
  });

  it('reads utilisation and memory of an idle and of a busy GPU', async () => {
    for (const [state, utilizationPercent, memoryUsedMib] of [['idle', 0, 0], ['busy', 100, 21491]] as const) {
      const smi = fakeNvidiaSmi(state);
      try {
        expect(await gpuUsage()).to.deep.equal([{ index: 0, name: H100, utilizationPercent, memoryUsedMib, memoryTotalMib: 81559 }]);
      } finally {
        smi.restore();
      }
    }
  });

  it('the agent reports the detected card in its health and the busy GPU in its metrics', async () => {
    const smi = fakeNvidiaSmi('busy');
    const token = randomBytes(16).toString('hex');
    const agent = await startAgent({ token, runtime: 'process', orphanTimeoutSeconds: 0 });
    try {
      const client = new AgentClient(agent.url, token);
      expect((await client.health()).gpu).to.deep.equal({ name: H100, memoryMib: 81559, count: 1 });
      expect((await client.metrics()).gpus).to.deep.equal([
        { index: 0, name: H100, utilizationPercent: 100, memoryUsedMib: 21491, memoryTotalMib: 81559 },
      ]);
    } finally {
      await agent.close();
      smi.restore();
    }
  });
});
