import { expect } from 'chai';
import { isDnsLabel } from '../api/names.js';
import { randomRunName } from '../server/run-names.js';
import { closestMatch } from '../api/suggest.js';

describe('api: names', () => {
  it('accepts lowercase DNS labels of 1-40 characters that start with a letter', () => {
    for (const good of ['a', 'train', 'h100-pool', 'run-2', 'a'.repeat(40)]) expect(isDnsLabel(good), good).to.equal(true);
    for (const bad of ['', 'My_Fleet', 'UPPER', '-lead', 'trail-', '2fast', 'dot.ted', 'a'.repeat(41), 'sp ace']) expect(isDnsLabel(bad), bad).to.equal(false);
  });

  it('makes random run names that are valid and varied', () => {
    const names = new Set(Array.from({ length: 200 }, randomRunName));
    for (const name of names) {
      expect(name).to.match(/^[a-z]+-[a-z]+-\d$/);
      expect(isDnsLabel(name)).to.equal(true);
    }
    expect(names.size).to.be.greaterThan(150);
  });
});

describe('api: suggestions', () => {
  it('suggests the closest candidate only when it is close', () => {
    expect(closestMatch('gpus', ['gpu', 'cpu', 'disk'])).to.equal('gpu');
    expect(closestMatch('comands', ['commands', 'image'])).to.equal('commands');
    expect(closestMatch('VSCode', ['vscode', 'cursor'])).to.equal('vscode');
    expect(closestMatch('banana', ['gpu', 'cpu', 'disk'])).to.equal(null);
  });
});
