import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DATABASE_KINDS } from './helpers/databases.js';
import { useGpucloudSuite, type GpucloudSuite } from './helpers/gpucloud-suite.js';
import { show } from './helpers/cli.js';

/** A task that fails the first time it runs and succeeds after: a marker file outlives the attempt. */
function flakyTask(name: string, marker: string, retry: string, before = 'echo starting'): string {
  return `type: task
name: ${name}
resources:
  gpu: L4
commands:
  - ${before}
  - test -f ${marker} || { touch ${marker}; echo "first try fails"; exit 3; }
  - echo "second try works"
${retry}
`;
}

for (const kind of DATABASE_KINDS) {
  describe(`retry policy (${kind})`, function () {
    this.timeout(90_000);
    let suite: GpucloudSuite;

    useGpucloudSuite(kind, (started) => { suite = started; });

    it('resubmits a task that failed with an error as attempt 2, with its own logs, shown in ps and events; apply follows it to the end', async () => {
      writeFileSync(join(suite.work, 'flaky.yml'), flakyTask('flaky', join(suite.work, 'flaky-marker'), 'retry:\n  on_events: [error]\n  duration: 10m'));
      const applied = await suite.cli(['apply', '-f', join(suite.work, 'flaky.yml'), '-y']);
      expect(applied.code, show(applied)).to.equal(0);
      expect(applied.stdout).to.match(/first try fails\n(.*\n)*second try works\n/);
      expect(applied.stderr).to.match(/attempt 1 failed: exited with code 3; following attempt 2, submitted under the run's retry\n/);
      const done = await suite.waitFor('flaky', (run) => run.status === 'done', 'attempt 2 of flaky to finish');
      expect(done.attempt).to.equal(2);
      expect(done.terminationReason).to.equal('done_by_user_code');

      const logs = await suite.cli(['logs', 'flaky']);
      expect(logs.code, show(logs)).to.equal(0);
      expect(logs.stdout).to.contain('second try works');
      expect(logs.stdout).not.to.contain('first try fails');
      const first = await suite.cli(['logs', 'flaky', '--attempt', '1']);
      expect(first.code, show(first)).to.equal(0);
      expect(first.stdout).to.contain('first try fails');
      expect(first.stdout).not.to.contain('second try works');
      const third = await suite.cli(['logs', 'flaky', '--attempt', '3']);
      expect(third.code, show(third)).to.equal(1);
      expect(third.stderr).to.contain('run flaky has attempts 1 to 2');

      const ps = await suite.cli(['ps', '-a']);
      expect(ps.stdout).to.match(/^flaky\s+task\s+done \(attempt 2\)\s+L4/m);
      const events = await suite.events('flaky');
      expect(events).to.include.members([
        'Failed: failed_by_user_code: exited with code 3 (attempt 1)',
        'Done: done_by_user_code: exited with code 0 (attempt 2)',
      ]);
      expect(events.find((e) => e.startsWith('Retrying: '))).to.match(/^Retrying: attempt 1 failed \(failed_by_user_code\); attempt 2 submitted, retry on error until \d{4}-/);
    });

    it('does not resubmit a failure whose event is not listed, nor one past retry.duration', async () => {
      await suite.apply('unlisted', flakyTask('unlisted', join(suite.work, 'unlisted-marker'), 'retry:\n  on_events: [interruption, no-capacity]'));
      // It fails 2 s after it was submitted at the earliest, when its 1 s of retrying has run out.
      await suite.apply('too-late', flakyTask('too-late', join(suite.work, 'too-late-marker'), 'retry:\n  duration: 1s', 'sleep 2'));
      for (const name of ['unlisted', 'too-late']) {
        const failed = await suite.waitFor(name, (run) => run.status === 'failed', `${name} to fail`);
        expect(failed.attempt, name).to.equal(1);
        expect(failed.exitCode, name).to.equal(3);
        expect((await suite.events(name)).some((e) => e.startsWith('Retrying')), name).to.equal(false);
      }
    });

    it('keeps a run with no offers in the queue under retry on no-capacity instead of failing it', async () => {
      await suite.apply('sixteen-l4', 'type: task\nname: sixteen-l4\nresources:\n  gpu: L4:16\ncommands: [echo hi]\nretry:\n  on_events: [no-capacity]\n  duration: 10m\n');
      const waiting = await suite.waitFor('sixteen-l4', (run) => run.statusMessage.includes('retrying on no-capacity'), 'sixteen-l4 to wait for capacity');
      expect(waiting.status).to.equal('submitted');
      expect(waiting.statusMessage).to.match(/^waiting: no offers: .*; retrying on no-capacity until \d{4}-/);
      expect((await suite.cli(['stop', 'sixteen-l4'])).code).to.equal(0);
      await suite.waitFor('sixteen-l4', (run) => run.status === 'terminated', 'sixteen-l4 to be stopped');
    });
  });
}
