import { expect } from 'chai';
import { BatchedCalls, batchedReads } from '../controllers/batched-calls.js';

/** A batch function that records each batch it was given and answers when `release` is called. */
function recorder() {
  const batches: number[][] = [];
  const pending: Array<() => void> = [];
  const calls = new BatchedCalls<number, number>(async (inputs) => {
    batches.push(inputs);
    await new Promise<void>((resolve) => pending.push(resolve));
    if (inputs.includes(-1)) throw new Error('refused');
    return inputs.map((input) => input * 10);
  }, (input) => String(Math.abs(input)));
  const release = async () => {
    while (pending.length === 0) await new Promise((resolve) => setImmediate(resolve));
    pending.shift()!();
  };
  return { batches, calls, release };
}

describe('batched calls: the statements of the watch loop gathered', () => {
  it('answers reads by id gathered into one read of all their ids, each its own row, and nothing for an id not found', async () => {
    const reads: string[][] = [];
    const rows = batchedReads(async (ids) => {
      reads.push(ids);
      return new Map(ids.filter((id) => id !== 'gone').map((id) => [id, { id, name: `row ${id}` }]));
    });
    const answers = await Promise.all(['a', 'gone', 'b'].map((id) => rows.call(id)));
    expect(answers).to.deep.equal([{ id: 'a', name: 'row a' }, undefined, { id: 'b', name: 'row b' }]);
    expect(reads).to.deep.equal([['a', 'gone', 'b']]);
  });

  it('makes the calls of one turn of the event loop in one batch, and answers each its own output', async () => {
    const { batches, calls, release } = recorder();
    const outputs = Promise.all([1, 2, 3].map((input) => calls.call(input)));
    await release();
    expect(await outputs).to.deep.equal([10, 20, 30]);
    expect(batches).to.deep.equal([[1, 2, 3]]);
  });

  it('gathers the calls made while a batch is in flight into the next one', async () => {
    const { batches, calls, release } = recorder();
    const first = calls.call(1);
    await new Promise((resolve) => setImmediate(resolve));
    const later = [calls.call(2), calls.call(3)];
    await new Promise((resolve) => setTimeout(resolve, 10));
    expect(batches, 'nothing more while the first is in flight').to.deep.equal([[1]]);
    await release();
    await release();
    expect(await Promise.all([first, ...later])).to.deep.equal([10, 20, 30]);
    expect(batches).to.deep.equal([[1], [2, 3]]);
  });

  it('never puts two calls of the same key in one batch', async () => {
    const { batches, calls, release } = recorder();
    const outputs = Promise.all([4, 5, 4].map((input) => calls.call(input)));
    await release();
    await release();
    expect(await outputs).to.deep.equal([40, 50, 40]);
    expect(batches).to.deep.equal([[4, 5], [4]]);
  });

  it('fails the calls of a failed batch only, and goes on with the next', async () => {
    const { calls, release } = recorder();
    const failed = [calls.call(-1), calls.call(2)];
    await new Promise((resolve) => setImmediate(resolve));
    const next = calls.call(3);
    await release();
    for (const call of failed) await call.then(() => expect.fail('answered'), (error: Error) => expect(error.message).to.equal('refused'));
    await release();
    expect(await next).to.equal(30);
  });
});
