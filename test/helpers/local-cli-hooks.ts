import { endCliSuite, startLocalCliSuite, type LocalCliSuite } from './cli.js';
import type { DatabaseKind } from './databases.js';

/** Starts a LocalCliSuite before the tests of the enclosing describe and ends it after them; the result reads it. */
export function useLocalCliSuite(kind: DatabaseKind): () => LocalCliSuite {
  let suite: LocalCliSuite | undefined;
  before(async function () {
    this.timeout(120_000);
    suite = await startLocalCliSuite(kind);
  });
  after(async function () {
    this.timeout(60_000);
    await endCliSuite(suite?.server, suite?.home, suite?.work);
  });
  return () => suite!;
}
