import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { idsMadeSince, processIdClock, type ProcessIdClock } from '../agent/process-ids.js';

const clock = (lastId: number, forks: number, alive = 100, idLimit = 32768): ProcessIdClock => ({ lastId, forks, alive, idLimit });

describe('process ids made since a moment (a job\'s end reads only the processes made after its start)', () => {
  it('keeps the ids handed out between the two moments, and none from before', () => {
    expect(idsMadeSince([1, 999, 1000, 1001, 1100, 1200, 1201, 30000], clock(1000, 5000), clock(1200, 5200))).to.deep.equal([1001, 1100, 1200]);
  });

  it('keeps the ids on both sides of a wrap past pid_max', () => {
    expect(idsMadeSince([299, 300, 500, 501, 31999, 32000, 32001, 32767], clock(32000, 5000), clock(500, 5968))).to.deep.equal([299, 300, 500, 32001, 32767]);
  });

  it('keeps none when no process was made since', () => {
    expect(idsMadeSince([1, 1000, 5000], clock(1000, 5000), clock(1000, 5000))).to.deep.equal([]);
  });

  it('keeps every id once the ids may have gone all the way round', () => {
    const ids = [1, 1000, 1001, 5000];
    // 32 368 forks, or fewer forks with as many processes alive to skip, reach a full round of 32 468 ids.
    expect(idsMadeSince(ids, clock(1000, 0), clock(1001, 32_368))).to.deep.equal(ids);
    expect(idsMadeSince(ids, clock(1000, 0, 20_000), clock(1001, 12_468))).to.deep.equal(ids);
    expect(idsMadeSince(ids, clock(1000, 0, 20_000), clock(1001, 12_467))).to.deep.equal([1001]);
  });

  it('keeps every id where either moment is unknown, or pid_max changed between them', () => {
    const ids = [1, 1000, 1001];
    expect(idsMadeSince(ids, null, clock(1001, 1))).to.deep.equal(ids);
    expect(idsMadeSince(ids, clock(1000, 0), null)).to.deep.equal(ids);
    expect(idsMadeSince(ids, clock(1000, 0), clock(1001, 1, 100, 4_194_304))).to.deep.equal(ids);
  });

  it('reads this machine\'s /proc: a process started after a reading is kept, this older one is not', async function () {
    if (process.platform !== 'linux') this.skip();
    const since = processIdClock();
    expect(since, '/proc/loadavg, /proc/stat and pid_max readable').to.not.equal(null);
    const child = spawn('sleep', ['5'], { stdio: 'ignore' });
    await new Promise((resolve) => child.once('spawn', resolve));
    try {
      const now = processIdClock();
      expect(now!.forks).to.be.greaterThan(since!.forks);
      expect(idsMadeSince([process.pid, child.pid!], since, now)).to.deep.equal([child.pid]);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
