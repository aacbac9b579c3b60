import { protocol } from '@electric-sql/pglite';
import { expect } from 'chai';
import type { Worker } from 'node:worker_threads';
import { PgliteThread } from '../store/pglite-thread.js';

/** The embedded database's thread (store/pglite-thread.ts) gone under the server: nothing may wait for it for ever. */
describe("the embedded database's thread, ended under the server", function () {
  this.timeout(60_000);

  it('fails the statement in flight and every later one at once, saying so, and still closes', async () => {
    const thread = await PgliteThread.start({ dataDir: undefined, settings: [] });
    expect((await thread.run(protocol.serialize.query('SELECT 1'), false)).length).to.be.greaterThan(0);

    const inFlight = thread.run(protocol.serialize.query('SELECT pg_sleep(5)'), false);
    await (thread as unknown as { worker: Worker }).worker.terminate();
    const started = Date.now();
    await expectFailure(inFlight, /the embedded database's thread ended \(exit 1\); restart the server/);
    await expectFailure(thread.run(protocol.serialize.query('SELECT 1'), false), /thread ended \(exit 1\)/);
    expect(Date.now() - started).to.be.lessThan(1_000);
    await thread.close();
  });

  it('refuses statements once closed', async () => {
    const thread = await PgliteThread.start({ dataDir: undefined, settings: [] });
    await thread.close();
    await expectFailure(thread.run(protocol.serialize.query('SELECT 1'), false), /the embedded database is closed/);
  });
});

async function expectFailure(answer: Promise<unknown>, message: RegExp): Promise<void> {
  const outcome = await answer.then(() => undefined, (error: Error) => error);
  expect(outcome, 'the statement failed').to.be.instanceOf(Error);
  expect(outcome!.message).to.match(message);
}
