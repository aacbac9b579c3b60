import { expect } from 'chai';
import type Docker from 'dockerode';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { dockerClient } from '../agent/docker-connection.js';
import { DockerLogReader } from '../agent/docker-logs.js';
import { JobLog } from '../agent/job-log.js';
import { ensurePodman, TEST_IMAGE } from './helpers/podman.js';

/** The frames of a multiplexed log stream, each with its header. */
function frames(stream: Buffer): Buffer[] {
  const found: Buffer[] = [];
  for (let at = 0; at + 8 <= stream.length; at += 8 + stream.readUInt32BE(at + 4)) found.push(stream.subarray(at, at + 8 + stream.readUInt32BE(at + 4)));
  return found;
}

describe("the agent's reader of a container's log, when the follow stream missed its end (Podman)", function () {
  this.timeout(60_000);
  let scratch: string;
  let container: Docker.Container;
  let whole: Buffer;

  before(async function () {
    this.timeout(600_000);
    scratch = mkdtempSync(join(tmpdir(), 'docker-log-reader-'));
    const docker = dockerClient(await ensurePodman());
    // Lines in two seconds: reading again goes back to the last one's second, whose first lines were read already.
    container = await docker.createContainer({ Image: TEST_IMAGE, Cmd: ['sh', '-c', 'echo one; sleep 1.2; echo two; echo three >&2; echo four'] });
    await container.start();
    await container.wait();
    whole = await container.logs({ follow: false, stdout: true, stderr: true, timestamps: true });
    expect(frames(whole)).to.have.length(4);
  });

  after(async () => {
    await container?.remove({ force: true });
    rmSync(scratch, { recursive: true, force: true });
  });

  const read = async (followed: Buffer, catchUp: boolean) => {
    const log = new JobLog(join(scratch, `${Math.random()}.log`));
    const reader = new DockerLogReader(log);
    reader.push(followed);
    if (catchUp) reader.catchUp(await container.logs({ follow: false, stdout: true, stderr: true, timestamps: true, since: reader.resumeSince }));
    log.close();
    return log.read(0, 100).map((entry) => `${entry.stream}: ${entry.text}`);
  };
  const readAfterFollowing = (followed: Buffer) => read(followed, true);
  let all: string[];

  before(async () => {
    all = await read(whole, false);
    expect([...all].sort()).to.deep.equal(['stderr: three', 'stdout: four', 'stdout: one', 'stdout: two']);
  });

  it('adds the lines the follow stream missed, each once, from the second it had reached', async () => {
    const [first, second, third] = frames(whole);
    expect(await readAfterFollowing(Buffer.concat([first!, second!, third!]))).to.deep.equal(all);
  });

  it('adds a line the follow stream gave only part of, once', async () => {
    const [first, second, third, fourth] = frames(whole);
    expect(await readAfterFollowing(Buffer.concat([first!, second!, third!, fourth!.subarray(0, 12)]))).to.deep.equal(all);
  });

  it('adds nothing when the follow stream had it all, and everything when it had nothing', async () => {
    expect(await readAfterFollowing(whole)).to.deep.equal(all);
    expect(await readAfterFollowing(Buffer.alloc(0))).to.deep.equal(all);
  });
});
