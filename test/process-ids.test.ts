import { expect } from 'chai';
import { spawn } from 'node:child_process';
import { idsMadeSince, processIdClock, type ProcessIdClock } from '../agent/process-ids.js';

const clock = (lastId: number, forks: number, alive = 100, idLimit = 32768): ProcessIdClock => ({ lastId, forks, alive, idLimit });

describe('process ids made since a moment (a job\'s end reads only the processes made after its start)', () => {
  it('keeps the ids handed out between the two moments, and none from before', () => {
    expect(idsMadeSince([1, 999, 1000, 1001, 1100, 1200, 1201, 30000], clock(1000, 5000), clock(1200, 5200), 1001)).to.deep.equal([1001, 1100, 1200]);
  });

  it('keeps the ids on both sides of a wrap past pid_max', () => {
    expect(idsMadeSince([299, 300, 500, 501, 31999, 32000, 32001, 32767], clock(32000, 5000), clock(500, 5968), 32001)).to.deep.equal([299, 300, 500, 32001, 32767]);
  });

  it('keeps every id once the ids may have gone all the way round', () => {
    const ids = [1, 1000, 1001, 5000];
    // 32 368 forks, or fewer forks with as many processes alive to skip, reach a full round of 32 468 ids.
    expect(idsMadeSince(ids, clock(1000, 0), clock(1001, 32_368), 1001)).to.deep.equal(ids);
    expect(idsMadeSince(ids, clock(1000, 0, 20_000), clock(1001, 12_468), 1001)).to.deep.equal(ids);
    expect(idsMadeSince(ids, clock(1000, 0, 20_000), clock(1001, 12_467), 1001)).to.deep.equal([1001]);
  });

  it('keeps every id where either moment is unknown, or pid_max changed between them', () => {
    const ids = [1, 1000, 1001];
    expect(idsMadeSince(ids, null, clock(1001, 1), 1001)).to.deep.equal(ids);
    expect(idsMadeSince(ids, clock(1000, 0), null, 1001)).to.deep.equal(ids);
    expect(idsMadeSince(ids, clock(1000, 0), clock(1001, 1, 100, 4_194_304), 1001)).to.deep.equal(ids);
  });

  it('keeps every id where the job\'s first process is not among those made since: /proc tells ids otherwise than Linux', () => {
    // As lxcfs's loadavg reports it, the highest id in use rather than the last handed out: after a wrap, the shell got 501.
    const ids = [501, 502, 30000];
    expect(idsMadeSince(ids, clock(30000, 5000), clock(30000, 5002), 501)).to.deep.equal(ids);
  });

  it('reads this machine\'s /proc: a process started after a reading is kept, this older one is not', async function () {
    if (process.platform !== 'linux') this.skip();
    const since = processIdClock();
    expect(since, '/proc/loadavg, /proc/stat and pid_max readable').to.not.equal(null);
    const first = spawn('sleep', ['5'], { stdio: 'ignore' });
    const second = spawn('sleep', ['5'], { stdio: 'ignore' });
    await Promise.all([first, second].map((child) => new Promise((resolve) => child.once('spawn', resolve))));
    try {
      const now = processIdClock();
      expect(now!.forks).to.be.greaterThan(since!.forks);
      expect(idsMadeSince([process.pid, second.pid!], since, now, first.pid!)).to.deep.equal([second.pid]);
    } finally {
      first.kill('SIGKILL');
      second.kill('SIGKILL');
    }
  });
});
