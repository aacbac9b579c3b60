import { expect } from 'chai';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { RUN_LIST_LIMIT, type Run } from '../api/objects.js';
import { normalizeResources } from '../api/resources.js';
import { refreshSshConfig } from '../cli/ssh-config.js';
import { getProject, userByToken } from '../store/projects.js';
import { insertRun } from '../store/runs.js';
import { addProject, makeHome, runCli, show } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { LOCAL_CONFIG, startTestServer, type TestServer } from './helpers/server.js';

/** A run of the list as far as the SSH entries read it: reachable at `host`, or not at all. */
function listedRun(name: string, reachable: boolean): Run {
  return { name, ssh: reachable ? { hostAlias: `orchestrator.main.${name}`, hostKeys: [`ssh-ed25519 KEY-OF-${name}`], replicas: [] } : null } as unknown as Run;
}

describe('a project with more runs than the server lists at once', () => {
  for (const kind of DATABASE_KINDS) {
    describe(`ps (${kind})`, function () {
      this.timeout(120_000);
      let server: TestServer;
      let home: ReturnType<typeof makeHome>;

      before(async () => {
        server = await startTestServer(kind, LOCAL_CONFIG);
        home = makeHome();
        await addProject(home.home, server.url);
        const project = (await getProject(server.db, 'main'))!;
        const user = (await userByToken(server.db, 'test-admin-token'))!;
        const requirement = normalizeResources(undefined, 'run');
        await server.db.transaction(async (tx) => {
          for (let i = 0; i < RUN_LIST_LIMIT + 5; i++) {
            await insertRun(tx, { projectId: project.id, userId: user.id, name: `queued-${i}`, kind: 'task', spec: { type: 'task', commands: ['true'] }, files: [], requirement, priority: 0 });
          }
        });
        // A second apart, in the order of their names, as applied one after another: inserted this fast, some would share
        // a submission time (the embedded database's clock counts milliseconds), and ties are listed in any order.
        await server.db.query(`UPDATE runs SET submitted_at = now() - make_interval(secs => $1 - substring(name from 8)::int) WHERE name LIKE 'queued-%'`, [RUN_LIST_LIMIT + 5]);
      });

      after(async () => {
        await server?.stop();
        home?.remove();
      });

      it('shows the newest runs the server lists and says that older ones are not shown; --json prints the list alone', async () => {
        const listed = await runCli(['ps'], { home: home.home });
        expect(listed.code, show(listed)).to.equal(0);
        const rows = listed.stdout.trimEnd().split('\n').slice(1);
        expect(rows).to.have.length(RUN_LIST_LIMIT);
        expect(rows[0]).to.match(new RegExp(`^queued-${RUN_LIST_LIMIT + 4}\\s`));
        expect(listed.stderr).to.include(`the newest ${RUN_LIST_LIMIT} active runs are shown, the most the server lists at once`);

        const json = await runCli(['ps', '--json'], { home: home.home });
        expect(json.code, show(json)).to.equal(0);
        expect((JSON.parse(json.stdout) as Run[]).map((run) => run.name)).to.have.length(RUN_LIST_LIMIT).and.include('queued-5').and.not.include('queued-4');
      });
    });
  }

  describe('the SSH entries a list refreshes', () => {
    let home: ReturnType<typeof makeHome>;
    let savedHome: string | undefined;
    const config = () => readFileSync(join(home.home, '.orchestrator', 'ssh', 'config'), 'utf8');

    beforeEach(() => {
      home = makeHome();
      savedHome = process.env.HOME;
      process.env.HOME = home.home;
    });

    afterEach(() => {
      process.env.HOME = savedHome;
      home.remove();
    });

    it('keeps the entry of a run that a full list does not name, and drops it once a shorter list leaves it out', () => {
      refreshSshConfig('main', [listedRun('old-dev', true), listedRun('newer', true)]);
      expect(config()).to.match(/^Host old-dev$/m);

      const full = [listedRun('newer', false), ...Array.from({ length: RUN_LIST_LIMIT - 1 }, (_, i) => listedRun(`task-${i}`, i === 0))];
      refreshSshConfig('main', full);
      expect(config()).to.match(/^Host old-dev$/m).and.match(/^Host task-0$/m);
      expect(config(), 'a run the full list names, no longer reachable').not.to.match(/^Host newer$/m);

      refreshSshConfig('main', [listedRun('task-0', true)]);
      expect(config()).to.match(/^Host task-0$/m).and.not.match(/^Host old-dev$/m);
    });
  });
});
