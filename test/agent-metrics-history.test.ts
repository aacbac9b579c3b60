import { expect } from 'chai';
import type { AgentMetrics } from '../api/agent.js';
import { HISTORY_INTERVAL_MS, HISTORY_KEPT_MS, MetricsHistory } from '../agent/metrics-history.js';
import { eventually } from './helpers/server.js';

const START = Date.parse('2026-01-01T00:00:00Z');
const sampleAt = (second: number): AgentMetrics => ({
  ts: new Date(START + second * 1000).toISOString(), cpuPercent: second % 100, memoryUsedMib: 1, memoryTotalMib: 2, gpus: [],
});

describe("the agent's metrics history", () => {
  it('keeps an hour of five-second samples and no more, however long it runs, the oldest going first', () => {
    const history = new MetricsHistory();
    expect(history.capacity).to.equal(HISTORY_KEPT_MS / HISTORY_INTERVAL_MS);
    const taken = 3 * history.capacity + 7;
    for (let second = 0; second < taken; second++) history.record(sampleAt(second));
    const kept = history.samples();
    expect(kept).to.have.length(history.capacity);
    expect(kept.map((sample) => sample.ts)).to.deep.equal(Array.from({ length: history.capacity }, (_, i) => sampleAt(taken - history.capacity + i).ts));
  });

  it("gives a job the samples taken while it ran, oldest first, and none before it started", () => {
    const history = new MetricsHistory(10);
    for (let second = 0; second < 8; second++) history.record(sampleAt(second));
    const at = (second: number) => new Date(START + second * 1000).toISOString();
    expect(history.of({ startedAt: at(2), finishedAt: at(5) }).map((sample) => sample.ts)).to.deep.equal([2, 3, 4, 5].map(at));
    expect(history.of({ startedAt: at(6), finishedAt: null }).map((sample) => sample.ts)).to.deep.equal([6, 7].map(at));
    expect(history.of({ startedAt: null, finishedAt: null })).to.deep.equal([]);
  });

  it('samples in the background only while a job needs it, one sample at a time', async () => {
    const history = new MetricsHistory(100);
    let busy = false;
    let taking = 0;
    let most = 0;
    let second = 0;
    const sample = async () => {
      most = Math.max(most, ++taking);
      await new Promise((resolve) => setTimeout(resolve, 30));
      taking--;
      return sampleAt(second++);
    };
    history.start(sample, () => busy, (error) => { throw error; }, 5);
    try {
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(history.samples(), 'no job, no sample').to.deep.equal([]);
      busy = true;
      await eventually(async () => history.samples().length >= 3, 5000, 'samples while busy');
      expect(most, 'a slow sample is not doubled').to.equal(1);
    } finally {
      history.stop();
    }
  });
});
