/**
 * A mocha root hook plugin (`--require`): appends each test file's wall time, hooks included, as `<ms>\t<file>` to the
 * file named by ORCHESTRATOR_TEST_TIMINGS, so that scripts/test.sh can name the files that make the suite long. In
 * parallel mode mocha runs root hooks once per file.
 */
import { appendFileSync } from 'node:fs';
import { relative } from 'node:path';
import type { Context } from 'mocha';

const timings = process.env.ORCHESTRATOR_TEST_TIMINGS;
let started = 0;

export const mochaHooks = timings ? {
  beforeAll(): void {
    started = Date.now();
  },
  afterAll(this: Context): void {
    const file = this.test?.parent?.suites.find((suite) => suite.file)?.file;
    if (file) appendFileSync(timings, `${Date.now() - started}\t${relative(process.cwd(), file)}\n`);
  },
} : {};
