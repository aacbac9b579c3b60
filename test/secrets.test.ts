import { expect } from 'chai';
import { createHash, randomBytes } from 'node:crypto';
import { statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SecretBox, SecretUndecryptableError } from '../store/secrets.js';
import { addProject, endCliSuite, makeHome, runCli, show, startLocalCliSuite, type LocalCliSuite } from './helpers/cli.js';
import { DATABASE_KINDS } from './helpers/databases.js';
import { eventually } from './helpers/server.js';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

describe('secret values at rest', () => {
  it('open only with the key, project and name they were sealed with', () => {
    const box = new SecretBox(randomBytes(32));
    const sealed = box.seal('project-1', 'HF_TOKEN', 'hf_abc');
    expect(sealed).not.to.include('hf_abc');
    expect(box.seal('project-1', 'HF_TOKEN', 'hf_abc'), 'a fresh nonce each time').not.to.equal(sealed);
    expect(box.open('project-1', 'HF_TOKEN', sealed)).to.equal('hf_abc');
    expect(() => box.open('project-2', 'HF_TOKEN', sealed)).to.throw(SecretUndecryptableError, /secret HF_TOKEN cannot be decrypted/);
    expect(() => box.open('project-1', 'OTHER', sealed)).to.throw(SecretUndecryptableError);
    expect(() => new SecretBox(randomBytes(32)).open('project-1', 'HF_TOKEN', sealed)).to.throw(SecretUndecryptableError, /same secrets key/);
  });
});

for (const kind of DATABASE_KINDS) {
  describe(`secrets through the CLI (${kind})`, function () {
    this.timeout(120_000);
    let suite: LocalCliSuite;
    let bob: ReturnType<typeof makeHome>;
    const cli = (args: string[], options: { input?: string; home?: string } = {}) =>
      runCli(args, { home: options.home ?? suite.home.home, cwd: suite.work, input: options.input });

    before(async () => {
      suite = await startLocalCliSuite(kind);
      const { body: user } = await suite.server.api('POST', '/api/users', { name: 'bob' });
      await suite.server.api('POST', '/api/projects/main/members', { user: 'bob', role: 'user' });
      bob = makeHome();
      await addProject(bob.home, suite.server.url, user.token);
    });
    after(async () => {
      bob?.remove();
      await endCliSuite(suite?.server, suite?.home, suite?.work);
    });

    it('sets from an argument, a file or stdin, lists names and dates only, gets, and deletes', async () => {
      const set = await cli(['secret', 'set', 'HF_TOKEN', '0012']);
      expect(set.code, show(set)).to.equal(0);
      expect(set.stderr).to.include('secret HF_TOKEN set in project main; runs use it as ${{ secrets.HF_TOKEN }}');
      expect((await cli(['secret', 'get', 'HF_TOKEN'])).stdout, 'a number-like value as typed').to.equal('0012\n');
      writeFileSync(join(suite.work, 'key.pem'), 'line one\nline two\n');
      expect((await cli(['secret', 'set', 'PEM', '--from-file', 'key.pem'])).code).to.equal(0);
      const piped = await cli(['secret', 'set', 'PIPED'], { input: 'from stdin\n' });
      expect(piped.code, show(piped)).to.equal(0);
      const again = await cli(['secret', 'set', 'HF_TOKEN', 'hf_second']);
      expect(again.stderr).to.include('secret HF_TOKEN updated');

      expect((await cli(['secret', 'get', 'HF_TOKEN'])).stdout).to.equal('hf_second\n');
      expect((await cli(['secret', 'get', 'PEM'])).stdout, 'a file as it is').to.equal('line one\nline two\n\n');
      expect((await cli(['secret', 'get', 'PIPED'])).stdout, 'stdin without its last newline').to.equal('from stdin\n');

      const list = await cli(['secret', 'list']);
      expect(list.stdout.split('\n')[0]).to.match(/^NAME\s+CREATED\s+UPDATED$/);
      expect(list.stdout).to.match(/HF_TOKEN\s+\d+s ago/);
      const json = JSON.parse((await cli(['secret', 'list', '--json'])).stdout) as Record<string, string>[];
      expect(json.map((s) => s.name)).to.deep.equal(['HF_TOKEN', 'PEM', 'PIPED']);
      expect(json.every((s) => Object.keys(s).sort().join() === 'createdAt,name,updatedAt')).to.equal(true);
      expect(JSON.stringify(json)).not.to.include('hf_second');

      expect((await cli(['secret', 'delete', 'PIPED'])).stderr).to.include('secret PIPED deleted from project main');
      const gone = await cli(['secret', 'get', 'PIPED']);
      expect(gone.code).to.equal(1);
      expect(gone.stderr).to.include('error: secret PIPED not found in project main');
      const badName = await cli(['secret', 'set', 'has space', 'x']);
      expect(badName.stderr).to.include('"has space" is not a valid secret name');
      const empty = await cli(['secret', 'set', 'EMPTY'], { input: '' });
      expect(empty.stderr).to.include('the value is empty');
    });

    it('keeps values encrypted under a key file of mode 0600 in the server\'s folder', async () => {
      await cli(['secret', 'set', 'AT_REST', 'plain-text-value']);
      expect(statSync(join(suite.server.dir, 'secrets-key')).mode & 0o777).to.equal(0o600);
      const rows = await suite.server.db.query(`SELECT sealed FROM secrets WHERE name = 'AT_REST'`);
      expect(rows).to.have.length(1);
      expect(rows[0]!.sealed).to.match(/^v1:/).and.not.to.include('plain-text-value');
      expect(rows[0]!.sealed).not.to.include(Buffer.from('plain-text-value').toString('base64'));
    });

    it('lets any member list names, and only project admins read, set or delete values', async () => {
      expect((await cli(['secret', 'list'], { home: bob.home })).stdout).to.include('HF_TOKEN');
      for (const args of [['get', 'HF_TOKEN'], ['set', 'HF_TOKEN', 'x'], ['delete', 'HF_TOKEN']]) {
        const refused = await cli(['secret', ...args], { home: bob.home });
        expect(refused.code, show(refused)).to.equal(1);
        expect(refused.stderr).to.include('only an admin of project main or a global admin may do this');
      }
      await suite.server.api('POST', '/api/projects/main/members', { user: 'bob', role: 'admin' });
      expect((await cli(['secret', 'get', 'HF_TOKEN'], { home: bob.home })).stdout).to.equal('hf_second\n');
      await suite.server.api('POST', '/api/projects/main/members', { user: 'bob', role: 'user' });
      const { body: outsider } = await suite.server.api('POST', '/api/users', { name: 'outsider' });
      const listed = await suite.server.api('GET', '/api/projects/main/secrets', undefined, outsider.token);
      expect(listed.status).to.equal(403);
      const tooBig = await suite.server.api('PUT', '/api/projects/main/secrets/BIG', { value: 'x'.repeat(64 * 1024 + 1) });
      expect([tooBig.status, tooBig.body.error.code]).to.deep.equal([413, 'payload_too_large']);
      const notText = await suite.server.api('PUT', '/api/projects/main/secrets/BAD', { value: 5 });
      expect([notText.status, notText.body.error.message]).to.deep.equal([400, 'value: expected a string, as {"value": "..."}']);
    });

    it('gives a run the value in its env, while its spec, ps, events and logs keep only the reference', async () => {
      const value = `s3cr3t-${randomBytes(6).toString('hex')}`;
      await cli(['secret', 'set', 'RUN_TOKEN', value]);
      writeFileSync(join(suite.work, 'uses-secret.yml'), [
        'type: task',
        'name: uses-secret',
        'env:',
        '  - TOKEN=${{ secrets.RUN_TOKEN }}',
        'commands:',
        '  - printf %s "$TOKEN" | sha256sum',
      ].join('\n'));
      const applied = await cli(['apply', '-f', 'uses-secret.yml', '-y']);
      expect(applied.code, show(applied)).to.equal(0);
      expect(applied.stdout).to.include(sha256(value));
      const run = await suite.server.api('GET', '/api/projects/main/runs/uses-secret');
      expect(run.body.spec.env).to.deep.equal({ TOKEN: '${{ secrets.RUN_TOKEN }}' });
      const everything = [
        JSON.stringify(run.body),
        (await cli(['ps', '--all', '--json'])).stdout,
        (await cli(['events'])).stdout,
        (await cli(['logs', 'uses-secret'])).stdout,
        JSON.stringify(await suite.server.db.query('SELECT * FROM runs')),
        JSON.stringify(await suite.server.db.query('SELECT * FROM events')),
      ];
      for (const text of everything) expect(text).not.to.include(value);
    });

    it('fails a run whose secret does not exist with a message naming the secret', async () => {
      writeFileSync(join(suite.work, 'missing-secret.yml'), [
        'type: task',
        'name: missing-secret',
        'env:',
        '  HF: ${{ secrets.NOT_THERE }}',
        'commands: [echo never]',
      ].join('\n'));
      const applied = await cli(['apply', '-f', 'missing-secret.yml', '-y']);
      expect(applied.code, show(applied)).to.equal(1);
      expect(applied.stderr).to.include('missing-secret failed: secret NOT_THERE is not set in the project; set it with: orchestrator secret set NOT_THERE');
      expect(applied.stdout).not.to.include('never');
    });

    it('fills secrets in probe headers: the replica is ready only when the header carries the value', async () => {
      const value = `probe-${randomBytes(6).toString('hex')}`;
      await cli(['secret', 'set', 'PROBE_TOKEN', value]);
      writeFileSync(join(suite.work, 'guard.py'), [
        'import hashlib, http.server, os',
        'class Handler(http.server.BaseHTTPRequestHandler):',
        '    def do_GET(self):',
        '        given = (self.headers.get("Authorization") or "").encode()',
        `        ok = hashlib.sha256(given).hexdigest() == "${sha256(`Bearer ${value}`)}"`,
        '        self.send_response(200 if ok else 401)',
        '        self.end_headers()',
        '    def log_message(self, *args):',
        '        pass',
        'http.server.HTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()',
      ].join('\n'));
      writeFileSync(join(suite.work, 'guarded.yml'), [
        'type: service',
        'name: guarded',
        'port: 8000',
        'files: [guard.py]',
        'commands: [python3 guard.py]',
        'probes:',
        '  - type: http',
        '    url: /health',
        '    interval: 1s',
        '    headers:',
        '      - name: Authorization',
        '        value: Bearer ${{ secrets.PROBE_TOKEN }}',
      ].join('\n'));
      const applied = await cli(['apply', '-f', 'guarded.yml', '-y']);
      expect(applied.code, show(applied)).to.equal(0);
      expect(applied.stdout).to.include('/proxy/services/main/guarded/');
      const run = await suite.server.api('GET', '/api/projects/main/runs/guarded');
      expect(JSON.stringify(run.body)).not.to.include(value);
      expect((await cli(['stop', 'guarded'])).code).to.equal(0);
      await eventually(async () => (await suite.server.api('GET', '/api/projects/main/runs/guarded')).body.status === 'terminated', 30_000, 'guarded to stop');
    });
  });
}
