import { expect } from 'chai';
import fc from 'fast-check';
import { posix } from 'node:path';
import { leavesFolder, resolveInside } from '../api/container-paths.js';

/** Paths made of the segments that matter to normalisation. */
const paths = fc.array(fc.constantFrom('', '.', '..', 'a', 'b.c', '...'), { maxLength: 8 }).map((segments) => segments.join('/'));

describe('api: container paths, without node:path (so the parser runs in a browser)', () => {
  it('says a relative path leaves its folder exactly when node:path normalises it to one above', () => {
    fc.assert(fc.property(paths, fc.boolean(), (path, absolute) => {
      const given = absolute ? `/${path}` : path;
      const normalized = posix.normalize(given);
      const leaves = !posix.isAbsolute(given) && (normalized === '..' || normalized.startsWith('../'));
      expect(leavesFolder(given), given).to.equal(leaves);
    }), { numRuns: 2000 });
  });

  it('resolves a path inside the container as node:path does', () => {
    fc.assert(fc.property(paths, fc.boolean(), (path, absolute) => {
      const given = absolute ? `/${path}` : path;
      expect(resolveInside('/workflow', given), given).to.equal(posix.resolve('/workflow', given));
    }), { numRuns: 2000 });
  });
});
