import { expect } from 'chai';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fillJobSecrets, jobSecretNames, shellQuote } from '../api/interpolation.js';
import { formatSpecError, parseSpecText, validateSpec } from '../api/parse.js';
import { endCliSuite, runCli, show, startLocalCliSuite, type LocalCliSuite } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';

const ENVIRONMENT = { IMAGE_TAG: '3.12', HF_USER: 'alice' };

function parsed(text: string, args: string[] = []) {
  const { specs, errors } = parseSpecText(text, 'run.yml', ENVIRONMENT, args);
  return { spec: specs[0] as Record<string, any> | undefined, errors: errors.map(formatSpecError) };
}

describe('interpolation in run configurations', () => {
  it('fills env.NAME from the applier\'s environment and run.args, shell-quoted, and keeps secrets for the server', () => {
    const { spec, errors } = parsed([
      'type: task',
      'commands: ["python train.py ${{ run.args }}"]',
      'image: python',
      'registry_auth: {username: "${{ env.HF_USER }}", password: "${{ secrets.REGISTRY_PASSWORD }}"}',
      'env:',
      '  - HF_TOKEN=${{secrets.HF_TOKEN}}',
      '  - LABEL=user-${{ env.HF_USER }}-${{ env.IMAGE_TAG }}',
    ].join('\n'), ['--epochs', '3', 'two words', "it's"]);
    expect(errors).to.deep.equal([]);
    expect(spec!.commands).to.deep.equal([`python train.py --epochs 3 'two words' 'it'\\''s'`]);
    expect(spec!.env).to.deep.equal({ HF_TOKEN: '${{ secrets.HF_TOKEN }}', LABEL: 'user-alice-3.12' });
    expect(spec!.registry_auth).to.deep.equal({ username: 'alice', password: '${{ secrets.REGISTRY_PASSWORD }}' });
  });

  it('fills run.args with nothing when apply was given no arguments', () => {
    expect(parsed('type: task\ncommands: ["echo [${{ run.args }}]"]').spec!.commands).to.deep.equal(['echo []']);
    expect(shellQuote('')).to.equal(`''`);
  });

  it('reports a bad expression at its line and field, in every kind, never as literal text', () => {
    const { errors } = parsed([
      'type: service',
      'port: 8000',
      'commands: [serve]',
      'probes:',
      '  - type: http',
      '    url: ${{ env.HF_USER }}',
      '    headers:',
      '      - name: X-Token',
      '        value: ${{ secrets.bad name }}',
      'env:',
      '  TOKEN: ${{ run.args }}',
    ].join('\n'));
    expect(errors).to.deep.equal([
      'run.yml:6:10: probes[0].url: ${{ env.HF_USER }} is not supported in probes.url; env.NAME and secrets.NAME work in env values, registry_auth, probe headers and repos credentials; run.args in commands',
      'run.yml:9:16: probes[0].headers[0].value: "${{ secrets.bad name }}" does not name a secret; after secrets. write a name of letters, digits, _ and -, starting with a letter or _, at most 64 characters',
      'run.yml:11:10: env.TOKEN: ${{ run.args }} works in commands only',
    ]);
  });

  it('takes secrets from a spec sent to the API, and refuses what only the CLI can fill in', () => {
    const ok = validateSpec({ type: 'task', commands: ['x'], env: { T: '${{ secrets.T }}' } });
    expect(ok.errors).to.deep.equal([]);
    const refused = validateSpec({ type: 'task', commands: ['x ${{ run.args }}'], env: { T: '${{ env.T }}' } });
    expect(refused.errors.map((e) => `${e.path}: ${e.message}`)).to.deep.equal([
      'commands[0]: ${{ run.args }} is filled in by the CLI when it applies a file; send the value itself',
      'env.T: ${{ env.T }} is filled in by the CLI when it applies a file; send the value itself',
    ]);
  });

  it('fills secrets in a job\'s env, registry and repo credentials only', () => {
    const job = {
      commands: ['echo ${{ secrets.A }}'],
      env: { A: '${{ secrets.A }}', B: 'x-${{ secrets.B }}' },
      registryAuth: { username: 'u', password: '${{ secrets.C }}' },
      repos: [{ path: '/workflow', url: 'https://bot:${{ secrets.D }}@example.com/r.git' }],
    };
    expect(jobSecretNames(job)).to.deep.equal(['A', 'B', 'C', 'D']);
    const filled = fillJobSecrets(job, new Map([['A', 'a$&'], ['B', 'b'], ['C', 'c'], ['D', 'd']]));
    expect(filled).to.deep.equal({
      commands: ['echo ${{ secrets.A }}'],
      env: { A: 'a$&', B: 'x-b' },
      registryAuth: { username: 'u', password: 'c' },
      repos: [{ path: '/workflow', url: 'https://bot:d@example.com/r.git' }],
    });
  });
});

for (const kind of DATABASE_KINDS) {
  describe(`apply with interpolation through the CLI (${kind})`, function () {
    this.timeout(90_000);
    let suite: LocalCliSuite;
    before(async () => { suite = await startLocalCliSuite(kind); });
    after(async () => { await endCliSuite(suite?.server, suite?.home, suite?.work); });

    it('runs the commands with the words after -- and env values from the applier\'s environment', async () => {
      writeFileSync(join(suite.work, 'args.yml'), [
        'type: task',
        'name: with-args',
        'env:',
        '  GREETING: hello ${{ env.WHO }}',
        'commands:',
        '  - printf "[%s]" "$GREETING" ${{ run.args }}',
      ].join('\n'));
      const applied = await runCli(['apply', '-f', 'args.yml', '-y', '--', '--flag', 'two words', '$HOME'], {
        home: suite.home.home, cwd: suite.work, env: { WHO: 'world' },
      });
      expect(applied.code, show(applied)).to.equal(0);
      expect(applied.stdout).to.include('[hello world][--flag][two words][$HOME]');
      const run = await suite.server.api('GET', '/api/projects/main/runs/with-args');
      expect(run.body.spec.env).to.deep.equal({ GREETING: 'hello world' });
    });

    it('refuses a file whose expression cannot be filled in, with its line, and applies nothing', async () => {
      writeFileSync(join(suite.work, 'unset.yml'), 'type: task\nname: unset\nenv:\n  A: ${{ env.NOT_SET_HERE }}\ncommands: [echo]\n');
      const applied = await runCli(['apply', '-f', 'unset.yml', '-y'], { home: suite.home.home, cwd: suite.work });
      expect(applied.code, show(applied)).to.equal(1);
      expect(applied.stderr).to.include('unset.yml:4:6: env.A: NOT_SET_HERE is not set in your environment (${{ env.NOT_SET_HERE }}); set it before applying');
      expect(applied.stderr).to.include('nothing was applied');
      expect((await suite.server.api('GET', '/api/projects/main/runs/unset')).status).to.equal(404);
    });
  });
}
