import { expect } from 'chai';
import { HeldRows } from '../controllers/held-rows.js';

describe('the rows a controller holds between looks (HeldRows)', () => {
  const ids = (taken: Array<{ row: { id?: unknown } }>) => taken.map((held) => held.row.id);

  it('takes the groups that fall due first, each with its rows due soon, as many rows as there is room for', () => {
    const held = new HeldRows();
    held.set({ id: 'a1' }, 300, 'a');
    held.set({ id: 'a2' }, 900, 'a');
    held.set({ id: 'a3' }, 5000, 'a');
    held.set({ id: 'b1' }, 100, 'b');
    held.set({ id: 'c1' }, 200, 'c');
    held.set({ id: 'c2' }, 250, 'c');
    held.set({ id: 'd1' }, 2000, 'd');
    // Due by 300: b, c and a, in that order; a's a2 comes along (due by 1000), a3 does not. Room for 4: a does not fit.
    expect(ids(held.takeDue(300, 1000, 4))).to.deep.equal(['b1', 'c1', 'c2']);
    expect(ids(held.takeDue(300, 1000, 4))).to.deep.equal(['a1', 'a2']);
    expect(held.takeDue(300, 1000, 4)).to.deep.equal([]);
    expect(held.earliestDueAt()).to.equal(2000);
    expect(held.size).to.equal(2);
  });

  it('takes a first group larger than the room whole, rather than none', () => {
    const held = new HeldRows();
    for (let n = 0; n < 5; n++) held.set({ id: `x${n}` }, n, 'x');
    expect(ids(held.takeDue(0, 10, 2))).to.have.length(5);
  });

  it('puts a row made due first, and a row held again at its new time only', () => {
    const held = new HeldRows();
    held.set({ id: 'early' }, 100, 'e');
    held.set({ id: 'stop' }, 900, 's');
    held.set({ id: 'moved' }, 50, 'm');
    held.set({ id: 'moved' }, 700, 'm');
    expect(held.makeDue('stop')).to.equal(true);
    expect(held.makeDue('gone')).to.equal(false);
    expect(held.earliestDueAt()).to.equal(0);
    expect(ids(held.takeDue(100, 100, 10))).to.deep.equal(['stop', 'early']);
    expect(held.earliestDueAt()).to.equal(700);
    expect(ids(held.takeDue(1000, 1000, 10))).to.deep.equal(['moved']);
    expect(held.earliestDueAt()).to.equal(Number.POSITIVE_INFINITY);
  });

  it('gives thousands of rows back in the order they fall due', () => {
    const held = new HeldRows();
    const dueAts = Array.from({ length: 5000 }, (_, n) => (n * 7919) % 10_007);
    dueAts.forEach((dueAt, n) => held.set({ id: `r${n}` }, dueAt, `r${n}`));
    const taken = held.takeDue(Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, 10_000).map((row) => row.dueAt);
    expect(taken).to.deep.equal([...dueAts].sort((a, b) => a - b));
  });
});
